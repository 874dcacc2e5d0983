"""Creation of the fastcomm c10d backend (called by torch.distributed per group).

Each process group gets its own ProcessGroupFastcomm, with its own internal Gloo
backend (CPU transport and fallback) and, where torch has NCCL and a GPU, an
internal NCCL backend for CUDA tensors. The delegates live under prefixes of the
group's store, so they never collide with the group's own keys or other groups.
"""

from __future__ import annotations

import dataclasses
import datetime
import os

import torch
import torch.distributed as dist

from fastcomm import _C, _shm
from fastcomm._agreement import agree
from fastcomm._gloo import make_gloo
from fastcomm._options import (
    Options,
    read_options,
    resolve_async_min_bytes,
    resolve_single_copy_max_bytes,
    resolve_single_copy_min_bytes,
)
from fastcomm._rendezvous import GroupFacts

BACKEND_NAME = "fastcomm"
"""The name the backend is registered under: ``dist.init_process_group("fastcomm")``."""


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
    config.shm_async_min_bytes = resolve_async_min_bytes(
        options.shm_async_min_bytes, local_ranks, len(_shm.usable_cpus())
    )
    config.shm_allreduce_single_copy_min_bytes = resolve_single_copy_min_bytes(
        options.shm_allreduce_single_copy_min_bytes, local_ranks, facts.cpus
    )
    config.shm_allreduce_single_copy_max_bytes = resolve_single_copy_max_bytes(
        options.shm_allreduce_single_copy_max_bytes, options.shm_huge_pages_min_bytes
    )
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
        rank,
        size,
        timeout,
        make_config(options, facts, plan, reason),
        gloo=gloo,
        check=check,
        nccl=nccl,
        engine=plan.engine,
        leaders=plan.leaders,
        failures=failures,
    )


def fastcomm_backend(group: dist.ProcessGroup | None = None) -> _C.ProcessGroupFastcomm:
    """The ProcessGroupFastcomm behind ``group`` (default: the default group):
    this rank's backend object, for what torch.distributed does not offer
    (``algorithm_counts()``, ``allocate_tensor()``, ``p2p_stats()``, ...) and for
    latency-bound calls without torch's Python wrapper
    (``fastcomm_backend(group).allreduce([t]).wait()``).

    Raises ValueError when ``group`` is not a fastcomm group.
    """
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    if not isinstance(backend, _C.ProcessGroupFastcomm):
        raise ValueError(
            f"fastcomm_backend: group {pg.group_name!r} is not a fastcomm group (got {type(backend).__name__})"
        )
    return backend


# torch's switch: its reducer asks the group's backend for bucket memory unless this is "1" (its default)
_DDP_COMM_MEM_VARIABLE = "DDP_DISABLE_COMM_MEM"


def enable_ddp_arena() -> None:
    """DDP models built after this call keep their gradient buckets in fastcomm's
    shared-memory arena wherever their group is a fastcomm group whose ranks
    share a host and their parameters are on CPU: the ranks then sum each
    bucket in place in one another's memory, with no copy into or out of the
    segment (docs/algorithms.md, "The arena"). Elsewhere buckets are as before.

    Call it on every rank alike, before ``DistributedDataParallel(...)``: an
    all_reduce needs every rank's tensor in the arena or none (a mix fails on
    every rank). It sets torch's ``DDP_DISABLE_COMM_MEM=0`` in this process's
    environment (inherited by the processes it starts); setting that variable
    in the launcher's environment does the same.

    Why this is not the default: torch's reducer decides where a bucket lives
    from that one environment variable, for every DDP model of the process,
    each time it lays out buckets (at construction and at the rebuild after the
    first step), and then from whether the group's backend offers memory
    (``Backend::supportsTensorAlloc``). No fastcomm group can opt in alone. Set
    for fastcomm's sake, it would also move the buckets of NCCL DDP models in
    the same process into NCCL's memory pool (``ncclMemAlloc``, on GPUs that
    support multicast), and those of any other backend that offers memory.
    Gloo offers none, so Gloo groups are unaffected either way.
    """
    os.environ[_DDP_COMM_MEM_VARIABLE] = "0"
