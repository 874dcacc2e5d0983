"""Creation of the fastcomm c10d backend (called by torch.distributed per group).

Each process group gets its own ProcessGroupFastcomm, with its own internal Gloo
backend (CPU transport and fallback) and, where torch has NCCL and a GPU, an
internal NCCL backend for CUDA tensors. The delegates live under prefixes of the
group's store, so they never collide with the group's own keys or other groups.
"""
from __future__ import annotations

import dataclasses
import datetime

import torch
import torch.distributed as dist

from fastcomm import _C, _shm
from fastcomm._agreement import agree
from fastcomm._gloo import make_gloo
from fastcomm._options import (Options, read_options, resolve_async_min_bytes, resolve_single_copy_max_bytes,
                               resolve_single_copy_min_bytes)
from fastcomm._rendezvous import GroupFacts

BACKEND_NAME = "fastcomm"


def _cuda_unavailable_reason() -> str:
    """Empty when CUDA collectives can run; otherwise why they cannot."""
    if not dist.is_nccl_available():
        return "this torch build has no NCCL"
    if not torch.cuda.is_available():
        return "no CUDA device is visible"
    return ""


def _make_nccl(store: dist.Store, rank: int, size: int, timeout: datetime.timedelta):
    nccl_options = dist.ProcessGroupNCCL.Options()
    nccl_options._timeout = timeout
    return dist.ProcessGroupNCCL(dist.PrefixStore("fastcomm/nccl/", store), rank, size, nccl_options)


def make_config(options: Options, facts: GroupFacts, plan: _shm.ShmPlan, cuda_unavailable_reason: str) -> _C.Config:
    """The group's one configuration object for C++: every option, copied by
    field name (a field C++ lacks fails here), plus the host plan. What decides
    the protocol comes from the group's facts (the same on every rank); the op
    queue's threshold only from this rank's own CPUs (it moves no data)."""
    config = _C.Config()
    for field in dataclasses.fields(options):
        setattr(config, field.name, getattr(options, field.name))
    local_ranks = plan.engine.local_size if plan.engine is not None else 1
    config.shm_async_min_bytes = resolve_async_min_bytes(options.shm_async_min_bytes, local_ranks,
                                                         len(_shm.usable_cpus()))
    config.shm_allreduce_single_copy_min_bytes = resolve_single_copy_min_bytes(
        options.shm_allreduce_single_copy_min_bytes, local_ranks, facts.cpus)
    config.shm_allreduce_single_copy_max_bytes = resolve_single_copy_max_bytes(
        options.shm_allreduce_single_copy_max_bytes, options.shm_huge_pages_min_bytes)
    config.host_of_rank = plan.host_of_rank
    config.cuda_unavailable_reason = cuda_unavailable_reason
    return config


def create_backend(dist_options, backend_options=None) -> _C.ProcessGroupFastcomm:
    """The creator registered with ``dist.Backend.register_backend(..., extended_api=True)``.

    ``dist_options`` carries store, group_rank, group_size and timeout;
    ``backend_options`` (the ``pg_options`` of init_process_group) is unused today.
    """
    store = dist_options.store
    rank, size = dist_options.group_rank, dist_options.group_size
    timeout = dist_options.timeout
    options = read_options()
    facts = agree(store, rank, size, timeout, options)  # first: a refused group has made nothing yet
    gloo = make_gloo(store, "fastcomm/gloo/", rank, size, timeout, options)
    # Where the ranks compare each call before it goes to Gloo (csrc/algorithms/call_check.h): one
    # thread, so the checks complete in the order they were issued.
    check = make_gloo(store, "fastcomm/check/", rank, size, timeout, options, threads=1) if size > 1 else None
    reason = _cuda_unavailable_reason()
    nccl = _make_nccl(store, rank, size, timeout) if not reason else None
    plan = _shm.setup(store, rank, size, timeout, options, facts)
    # Hierarchical groups: host leaders post why an op failed here, for the other hosts' errors.
    failures = dist.PrefixStore("fastcomm/failures/", store) if plan.host_of_rank else None
    return _C.ProcessGroupFastcomm(
        rank, size, timeout, make_config(options, facts, plan, reason),
        gloo=gloo, check=check, nccl=nccl, engine=plan.engine, leaders=plan.leaders, failures=failures,
    )


def fastcomm_backend(group: dist.ProcessGroup | None = None) -> _C.ProcessGroupFastcomm:
    """The ProcessGroupFastcomm behind ``group`` (default: the default group)."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    if not isinstance(backend, _C.ProcessGroupFastcomm):
        raise ValueError(f"fastcomm_backend: group {pg.group_name!r} is not a fastcomm group (got {type(backend).__name__})")
    return backend
