"""Which algorithm runs each collective at each size, for a given world size
and host layout: asked of the C++ dispatcher that decides it
(csrc/algorithms/dispatcher.h), by running the calls.

The dispatcher's choice needs a live group (each algorithm's accepts() looks
at the group's engine, arena and host plan), so this starts one on this
machine: `world_size` ranks as processes, hosts simulated by
FASTCOMM_RANKS_PER_HOST, with this process's FASTCOMM_* options. Every call
runs twice on the same buffers; the table shows what the second one launched
(algorithm_counts() before and after), and the first where it differed (a
group's first single-copy all_reduce asks the kernel for permission and may
run its fallback steps). Simulated hosts choose as real ones do, except where
the automatic values follow the machine (its CPUs) or the kernel (single copy).

Sizes follow fastcomm-bench (nccl-tests): the bytes of a call's largest buffer
(all_gather: the output; reduce_scatter: the input; gather, scatter: the
root's whole buffer; all_to_all: each rank's whole buffer), split evenly
across ranks where the collective splits it.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import warnings

import torch
import torch.distributed as dist

COLLECTIVES = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "reduce",
    "gather",
    "scatter",
    "barrier",
    "send/recv",
)
# 8 B, then the powers of 4 from 16 B to 64 MiB.
SIZES = (8,) + tuple(4**k for k in range(2, 14))
SPLIT = {"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"}
GROUP_TIMEOUT = datetime.timedelta(seconds=60)
_RESULT_KEY = "fastcomm-doctor/result/"


@dataclasses.dataclass(frozen=True)
class Layout:
    world_size: int
    ranks_per_host: int  # 0: every rank on one host

    @property
    def hosts(self) -> int:
        return 1 if self.ranks_per_host == 0 else -(-self.world_size // self.ranks_per_host)

    def describe(self) -> str:
        if self.ranks_per_host == 0:
            return f"{self.world_size} rank(s) on one host"
        return (
            f"{self.world_size} ranks on {self.hosts} hosts of {self.ranks_per_host} "
            f"(simulated on this machine: FASTCOMM_RANKS_PER_HOST={self.ranks_per_host})"
        )


def layout(world_size: int, hosts: int | None = None, ranks_per_host: int | None = None) -> Layout:
    """The layout of `world_size` ranks on `hosts` hosts (consecutive blocks of
    equal size) or in blocks of `ranks_per_host`; ValueError when they do not fit."""
    if world_size < 1:
        raise ValueError(f"world size must be at least 1, got {world_size}")
    if hosts is not None and ranks_per_host is not None:
        raise ValueError("give --hosts or --ranks-per-host, not both")
    if hosts is not None:
        if hosts < 1 or world_size % hosts:
            raise ValueError(f"{world_size} ranks do not split evenly into {hosts} hosts")
        ranks_per_host = world_size // hosts
    if ranks_per_host is None or ranks_per_host >= world_size:
        return Layout(world_size, 0)
    if ranks_per_host < 1:
        raise ValueError(f"ranks per host must be at least 1, got {ranks_per_host}")
    return Layout(world_size, ranks_per_host)


def count_of(name: str, size: int, element: int, world_size: int) -> int:
    """Elements of the call's largest buffer (0: too small to split over the ranks)."""
    count = size // element
    return count // world_size * world_size if name in SPLIT else count


def make_call(name: str, size: int, dtype: torch.dtype, rank: int, world_size: int):
    """A function that issues collective `name` of `size` bytes (fastcomm-bench's
    meaning) on the default group and waits for it; None where the size holds
    fewer elements than the collective needs."""
    n = world_size
    if name == "barrier":
        return dist.barrier
    count = count_of(name, size, torch.empty((), dtype=dtype).element_size(), n)
    if count == 0 or (name == "send/recv" and n == 1):
        return None
    zeros = lambda k: torch.zeros(k, dtype=dtype)  # noqa: E731  (contents do not decide the algorithm)
    part = count // n
    if name == "all_reduce":
        t = zeros(count)
        return lambda: dist.all_reduce(t)
    if name == "broadcast":
        t = zeros(count)
        return lambda: dist.broadcast(t, src=0)
    if name == "reduce":
        t = zeros(count)
        return lambda: dist.reduce(t, dst=0)
    if name == "all_gather":
        from fastcomm._compat import all_gather_single

        out, mine = zeros(count), zeros(part)
        return lambda: all_gather_single(out, mine)
    if name == "reduce_scatter":
        # torch 2.13 renamed reduce_scatter_tensor (now deprecated) to reduce_scatter_single.
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        full, mine = zeros(count), zeros(part)
        return lambda: reduce_scatter(mine, full)
    if name == "all_to_all":
        send, recv = zeros(count), zeros(count)
        return lambda: dist.all_to_all_single(recv, send)
    if name == "gather":
        mine, pieces = zeros(part), [zeros(part) for _ in range(n)] if rank == 0 else None
        return lambda: dist.gather(mine, gather_list=pieces, dst=0)
    if name == "scatter":
        mine, pieces = zeros(part), [zeros(part) for _ in range(n)] if rank == 0 else None
        return lambda: dist.scatter(mine, scatter_list=pieces, src=0)
    if name == "send/recv":
        send, recv = zeros(count), zeros(count)

        def exchange():
            ops = [
                dist.P2POp(dist.isend, send, group_peer=(rank + 1) % n),
                dist.P2POp(dist.irecv, recv, group_peer=(rank - 1) % n),
            ]
            for work in dist.batch_isend_irecv(ops):
                work.wait()

        return exchange
    raise ValueError(f"unknown collective {name!r} (one of {', '.join(COLLECTIVES)})")


def _launched(before: dict, after: dict, order: list[str]) -> list[list]:
    """[name, launches] of each algorithm launched between two algorithm_counts()
    readings, in the order the dispatcher asks them (adapters first)."""
    return [[name, after[name] - before.get(name, 0)] for name in order if after.get(name, 0) > before.get(name, 0)]


def _skipped(name: str, world_size: int, dtype: torch.dtype) -> str:
    """Why make_call made no call of `name`."""
    if name == "send/recv" and world_size == 1:
        return "one rank: no peer"
    return "too small to split over the ranks" if name in SPLIT else f"smaller than one {dtype} element"


def _rank(rank: int, world_size: int, store, plan: dict) -> list[dict] | None:
    """One rank of the run (started by fastcomm.bench.harness.spawn_ranks);
    rank 0 returns every rank's result, the others None."""
    os.environ.update(plan["env"])
    import fastcomm
    from fastcomm import _C, _shm

    torch.set_num_threads(1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.init_process_group("fastcomm", store=store, rank=rank, world_size=world_size, timeout=GROUP_TIMEOUT)
    backend = fastcomm.fastcomm_backend()
    order = list(backend.algorithm_names())
    dtype = getattr(torch, plan["dtype"])
    rows = {}
    for name in plan["collectives"]:
        row = []
        for size in [0] if name == "barrier" else plan["sizes"]:
            call = make_call(name, size, dtype, rank, world_size)
            if call is None:
                row.append({"bytes": size, "skipped": _skipped(name, world_size, dtype)})
                continue
            counts = [backend.algorithm_counts()]
            for _ in range(2):
                call()
                counts.append(backend.algorithm_counts())
            row.append(
                {
                    "bytes": size,
                    "first": _launched(counts[0], counts[1], order),
                    "steady": _launched(counts[1], counts[2], order),
                }
            )
        rows[name] = row
    config = backend.config
    engine = backend.shm_engine
    result = {
        "rank": rank,
        "rows": rows,
        "registered": order,
        "engine_local_size": engine.local_size if engine is not None else 0,
        "host_of_rank": list(config.host_of_rank),
        "config": {
            field: getattr(config, field)
            for field in dir(config)
            if not field.startswith("_") and isinstance(getattr(config, field), (int, str, bool))
        },
        "usable_cpus": len(_shm.usable_cpus()),
        "p2p": backend.p2p_stats(),
        "huge_pages": dict(_C.huge_page_counts()),
        "warnings": [str(w.message) for w in caught if "fastcomm" in str(w.message)],
    }
    # The others hand theirs to rank 0 through the store.
    store.set(f"{_RESULT_KEY}{rank}", json.dumps(result))
    everyone = None
    if rank == 0:
        keys = [f"{_RESULT_KEY}{r}" for r in range(world_size)]
        store.wait(keys, GROUP_TIMEOUT)
        everyone = [json.loads(store.get(key)) for key in keys]
    dist.barrier()
    dist.destroy_process_group()
    return everyone


def validate(collectives, dtype: str) -> None:
    """ValueError for a collective or dtype name the table does not know."""
    unknown = [c for c in collectives if c not in COLLECTIVES]
    if unknown:
        raise ValueError(f"unknown collective(s) {unknown} (known: {', '.join(COLLECTIVES)})")
    if not isinstance(getattr(torch, dtype, None), torch.dtype):
        raise ValueError(f"unknown dtype {dtype!r} (a torch dtype name, e.g. float32, bfloat16)")


def run(lay: Layout, sizes=SIZES, collectives=COLLECTIVES, dtype: str = "float32") -> dict:
    """Runs the table's calls on a new local group of `lay`; returns the run:
    {"layout", "dtype", "sizes", "ranks": [each rank's result]}."""
    from fastcomm.bench.harness import spawn_ranks

    validate(collectives, dtype)
    plan = {
        "env": {"FASTCOMM_RANKS_PER_HOST": str(lay.ranks_per_host)},
        "dtype": dtype,
        "sizes": list(sizes),
        "collectives": list(collectives),
    }
    ranks = spawn_ranks(_rank, lay.world_size, plan)
    return {
        "layout": dataclasses.asdict(lay) | {"hosts": lay.hosts},
        "dtype": dtype,
        "sizes": list(sizes),
        "ranks": ranks,
    }
