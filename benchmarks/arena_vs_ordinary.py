"""Collectives on arena tensors (read in place by the peers) against ordinary
tensors on the same fastcomm group, and Gloo, side by side in one run.

float32 SUM through torch.distributed: all_reduce (default), all_gather_single
(in place, as FSDP2 calls it: the input is this rank's block of the output),
reduce_scatter_single, or the fp16/bf16 hooks' mean (all_reduce_fp16/_bf16:
the backend's all_reduce_low_precision; Gloo's column is torch's
fp16_compress_hook arithmetic around its half-precision all_reduce); per size
one checked call each (exact inputs), then alternating rounds
(fastcomm/bench/harness.py), median of the slowest rank. A size is the whole
buffer (all_reduce's tensor, all_gather's output, reduce_scatter's input), as
nccl-tests counts it; busbw with its factor (fastcomm/bench/collectives.py).

    python benchmarks/arena_vs_ordinary.py                 # 2 ranks, 64 KiB .. 256 MiB
    python benchmarks/arena_vs_ordinary.py --nproc 4 --sizes 1M,16M
    python benchmarks/arena_vs_ordinary.py --collective all_gather
    python benchmarks/arena_vs_ordinary.py --collective all_reduce_fp16

The rows also go to a JSON record (benchmarks/results/arena_vs_ordinary.json
unless --record PATH or --no-record).
"""

from __future__ import annotations

import argparse
import datetime
import sys

import torch
import torch.distributed as dist

from fastcomm.bench.cli import parse_size
from fastcomm.bench.collectives import COLLECTIVES
import results_record
from fastcomm.bench.harness import add_round_arguments, alternating_rounds, measured, spawn_ranks, timer_of

DEFAULT_SIZES = "64K,1M,4M,16M,64M,256M"
LOW_PRECISION = {"all_reduce_fp16": torch.float16, "all_reduce_bf16": torch.bfloat16}


def _low_precision(wire: torch.dtype, buffer: torch.Tensor, rank: int, nproc: int, group, pattern):
    """The hooks' mean of `buffer` in `wire` precision: fastcomm's all_reduce_low_precision,
    or on Gloo torch's fp16_compress_hook arithmetic (divide, convert, all_reduce, convert back)."""
    import fastcomm

    if group is None:
        backend = fastcomm.fastcomm_backend()
        call = lambda: backend.all_reduce_low_precision(buffer, wire, 1.0 / nproc, float("inf")).wait()  # noqa: E731
    else:

        def call():
            half = buffer.div_(nproc).to(wire)
            dist.all_reduce(half, group=group)
            buffer.copy_(half)

    buffer.copy_(pattern(rank, buffer.numel()))
    call()
    # small integers / nproc: exact in either wire dtype for 2 and 4 ranks; the definition otherwise
    want = sum((pattern(r, buffer.numel()) / nproc).to(wire).float() for r in range(nproc)).to(wire).float()
    assert torch.equal(buffer, want), "low-precision all_reduce is wrong"
    return call


def _collective(kind: str, buffer: torch.Tensor, rank: int, nproc: int, block: int, group):
    """Checks one call of `kind` on `buffer` (the whole buffer, as nccl-tests sizes it) and
    returns the call to time."""
    pattern = lambda r, n: (torch.arange(n, dtype=torch.float32) % 7) + r  # noqa: E731
    if kind in LOW_PRECISION:
        return _low_precision(LOW_PRECISION[kind], buffer, rank, nproc, group, pattern)
    if kind == "all_reduce":
        buffer.copy_(pattern(rank, buffer.numel()))
        dist.all_reduce(buffer, group=group)
        want = (torch.arange(buffer.numel(), dtype=torch.float32) % 7) * nproc + nproc * (nproc - 1) // 2
        assert torch.equal(buffer, want), "all_reduce is wrong"
        return lambda: dist.all_reduce(buffer, group=group)
    if kind == "all_gather":
        mine = buffer[rank * block : (rank + 1) * block]
        mine.copy_(pattern(rank, block))
        dist.all_gather_single(buffer, mine, group=group)
        assert torch.equal(buffer, torch.cat([pattern(r, block) for r in range(nproc)])), "all_gather is wrong"
        return lambda: dist.all_gather_single(buffer, mine, group=group)
    out = torch.empty(block)
    buffer.copy_(pattern(rank, buffer.numel()))
    dist.reduce_scatter_single(out, buffer, group=group)
    want = sum(pattern(r, buffer.numel()) for r in range(nproc))[rank * block : (rank + 1) * block]
    assert torch.equal(out, want), "reduce_scatter is wrong"
    return lambda: dist.reduce_scatter_single(out, buffer, group=group)


def _rank(rank: int, nproc: int, store, args) -> list[tuple]:
    import fastcomm

    torch.set_num_threads(1)
    dist.init_process_group(
        "fastcomm", store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=300)
    )
    gloo = dist.new_group(backend="gloo")
    backend = fastcomm.fastcomm_backend()
    rows = []
    for size in args.size_list:
        count = max(1, size // 4)  # float32 elements of the whole buffer; gather and scatter: whole blocks
        if not args.collective.startswith("all_reduce"):
            count = max(nproc, count // nproc * nproc)
        block = count // nproc
        groups = {"arena": None, "ordinary": None, "gloo": gloo}
        calls = {}
        for name in groups:
            buffer = backend.allocate_tensor(count) if name == "arena" else torch.empty(count)
            calls[name] = _collective(args.collective, buffer, rank, nproc, block, groups[name])
        timers = {name: timer_of(call) for name, call in calls.items()}
        medians = alternating_rounds(
            timers,
            gloo,
            rounds=args.rounds,
            seconds=args.seconds,
            max_iters=args.max_iters,
            warmup_calls=args.warmup,
            align=lambda: dist.barrier(),
        )
        rows.append((count * 4, medians))
        measured(rank, f"{size} B")
    dist.destroy_process_group()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_round_arguments(p, seconds=1.0, max_iters=1000, warmup=3)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated sizes in bytes (K, M, G suffixes)")
    p.add_argument(
        "--collective", choices=["all_reduce", "all_gather", "reduce_scatter", *LOW_PRECISION], default="all_reduce"
    )
    results_record.add_arguments(p, "arena_vs_ordinary")
    args = p.parse_args(argv)
    args.size_list = [parse_size(s) for s in args.sizes.split(",")]
    if args.nproc < 2:
        p.error("need --nproc >= 2")
    rows = spawn_ranks(_rank, args.nproc, args)
    factor = COLLECTIVES["all_reduce" if args.collective in LOW_PRECISION else args.collective].bus_factor(args.nproc)
    print(
        f"# {args.collective} sum float32, {args.nproc} ranks on one host, dist API; median of {args.rounds}"
        " alternating rounds, slowest rank; busbw GB/s"
    )
    print(
        f"{'bytes':>12} {'arena us':>10} {'ordinary us':>12} {'gloo us':>10} {'arena bw':>9} {'ord bw':>8}"
        f" {'gloo bw':>8} {'ord/arena':>9} {'gloo/arena':>10}"
    )
    for nbytes, m in rows:
        bw = {k: nbytes * factor / t / 1e9 for k, t in m.items()}
        print(
            f"{nbytes:>12} {m['arena'] * 1e6:>10.1f} {m['ordinary'] * 1e6:>12.1f} {m['gloo'] * 1e6:>10.1f}"
            f" {bw['arena']:>9.2f} {bw['ordinary']:>8.2f} {bw['gloo']:>8.2f} {m['ordinary'] / m['arena']:>9.2f}"
            f" {m['gloo'] / m['arena']:>10.2f}"
        )
    results_record.save(
        args,
        "arena_vs_ordinary",
        [
            {
                "bytes": nbytes,
                "arena_s": m["arena"],
                "ordinary_s": m["ordinary"],
                "gloo_s": m["gloo"],
                "bus_factor": factor,
            }
            for nbytes, m in rows
        ],
        script=__file__,
        argv=argv,
        drop=("size_list", "sizes"),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
