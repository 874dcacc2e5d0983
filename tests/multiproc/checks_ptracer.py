"""Checks of the ptracer declaration (fastcomm/_ptracer.py), run on every rank
of a RankPool: a new group on a host whose Yama scope reads 1 (a file given to
the check: this kernel may have no Yama) declares the ranks' launcher, and
single copy stays exact, in all_reduce and in send/recv."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist

import fastcomm
from fastcomm import _ptracer

from reference import assert_equal


def launcher_declared_and_single_copy_exact(rank, world_size, scope_file):
    saved = _ptracer.YAMA_SCOPE_PATH
    _ptracer.YAMA_SCOPE_PATH = scope_file
    try:
        group = dist.new_group(backend="fastcomm")
    finally:
        _ptracer.YAMA_SCOPE_PATH = saved
    declaration = _ptracer.last
    # The pool's ranks are spawned by the test process: their launcher is it.
    assert (declaration.scope, declaration.chosen) == (1, os.getppid()), declaration
    if os.path.exists("/proc/sys/kernel/yama"):
        assert declaration.declared, declaration
    else:  # no Yama: the kernel refuses the prctl, and single copy needs no declaration
        assert not declaration.declared and "Invalid argument" in declaration.reason, declaration
    chosen = [None] * world_size
    dist.all_gather_object(chosen, declaration.chosen, group=group)
    assert chosen == [declaration.chosen] * world_size, chosen

    backend = fastcomm.fastcomm_backend(group)
    before = backend.algorithm_counts().get("allreduce_shm_single_copy", 0)
    numel = (1 << 20) // 4 + 3
    t = torch.arange(numel, dtype=torch.float32) * (rank + 1)
    dist.all_reduce(t, group=group)
    assert_equal(t, torch.arange(numel, dtype=torch.float32) * (world_size * (world_size + 1) // 2), "all_reduce")
    assert backend.algorithm_counts().get("allreduce_shm_single_copy", 0) == before + 1, backend.algorithm_counts()

    nxt, prv = (rank + 1) % world_size, (rank - 1) % world_size
    got = torch.zeros(3 << 20, dtype=torch.int32)
    sent = torch.arange(3 << 20, dtype=torch.int32) + rank
    stats = backend.p2p_stats()
    for work in [dist.isend(sent, dst=nxt, group=group), dist.irecv(got, src=prv, group=group)]:
        work.wait()
    assert_equal(got, torch.arange(3 << 20, dtype=torch.int32) + prv, "send/recv")
    after = backend.p2p_stats()
    assert after["sent_single_copy"] - stats["sent_single_copy"] == 1 and after["single_copy_refused"] == 0, after
    dist.destroy_process_group(group)
