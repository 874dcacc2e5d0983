"""FASTCOMM_SHM_BIND_CPUS=1: each rank's process is bound to one CPU by its local rank (runs in a RankPool)."""
import os
import threading

import torch
import torch.distributed as dist

from fastcomm import _shm


def _thread_cpus() -> dict[int, set[int]]:
    cpus = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            cpus[int(tid)] = os.sched_getaffinity(int(tid))
        except ProcessLookupError:  # the thread ended meanwhile
            pass
    return cpus


def bound_by_local_rank(rank, world_size):
    before = _shm._cpus_before_binding
    assert before is not None and len(before) >= 1, "the group's set-up did not bind this process"
    assert _shm.usable_cpus() == before  # what the spin and op-queue decisions count
    mine = {before[rank % len(before)]}  # one host: the local rank is the rank
    assert all(cpus == mine for cpus in _thread_cpus().values()), (mine, _thread_cpus())
    seen = []
    worker = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))
    worker.start()
    worker.join()
    assert seen == [mine], "a thread started later runs elsewhere"
    # A second group (other local ranks: reversed order) keeps the first binding.
    group = dist.new_group(list(reversed(range(world_size))))
    assert all(cpus == mine for cpus in _thread_cpus().values())
    t = torch.full((1000,), float(rank + 1))
    dist.all_reduce(t, group=group)
    assert torch.equal(t, torch.full((1000,), world_size * (world_size + 1) / 2)), t[:4]
    dist.destroy_process_group(group)
