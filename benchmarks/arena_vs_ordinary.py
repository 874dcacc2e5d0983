"""all_reduce of arena tensors (read in place by the peers) against ordinary
tensors on the same fastcomm group, and Gloo, side by side in one run.

float32 SUM through dist.all_reduce; per size one checked call each (exact
inputs), then alternating rounds (fastcomm/bench/harness.py), median of the
slowest rank; busbw with all_reduce's nccl-tests factor 2(n-1)/n.

    python benchmarks/arena_vs_ordinary.py                 # 2 ranks, 64 KiB .. 256 MiB
    python benchmarks/arena_vs_ordinary.py --nproc 4 --sizes 1M,16M
"""
from __future__ import annotations

import argparse
import datetime
import sys

import torch
import torch.distributed as dist

from fastcomm.bench.cli import parse_size
from fastcomm.bench.harness import add_round_arguments, alternating_rounds, measured, spawn_ranks, timer_of

DEFAULT_SIZES = "64K,1M,4M,16M,64M,256M"


def _rank(rank: int, nproc: int, store, args) -> list[tuple]:
    import fastcomm

    torch.set_num_threads(1)
    dist.init_process_group("fastcomm", store=store, rank=rank, world_size=nproc,
                            timeout=datetime.timedelta(seconds=300))
    gloo = dist.new_group(backend="gloo")
    backend = fastcomm.fastcomm_backend()
    rows = []
    for size in args.size_list:
        count = max(1, size // 4)
        mine = (torch.arange(count, dtype=torch.float32) % 7) + rank
        want = (torch.arange(count, dtype=torch.float32) % 7) * nproc + nproc * (nproc - 1) // 2
        tensors = {"arena": backend.allocate_tensor(count), "ordinary": torch.empty(count), "gloo": torch.empty(count)}
        groups = {"arena": None, "ordinary": None, "gloo": gloo}
        for name, t in tensors.items():
            t.copy_(mine)
            dist.all_reduce(t, group=groups[name])
            assert torch.equal(t, want), f"{name} all_reduce of {size} B is wrong"
        timers = {name: timer_of(lambda t=t, g=groups[name]: dist.all_reduce(t, group=g)) for name, t in tensors.items()}
        medians = alternating_rounds(timers, gloo, rounds=args.rounds, seconds=args.seconds, max_iters=args.max_iters,
                                     warmup_calls=args.warmup, align=lambda: dist.barrier())
        rows.append((count * 4, medians))
        measured(rank, f"{size} B")
    dist.destroy_process_group()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_round_arguments(p, seconds=1.0, max_iters=1000, warmup=3)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated sizes in bytes (K, M, G suffixes)")
    args = p.parse_args(argv)
    args.size_list = [parse_size(s) for s in args.sizes.split(",")]
    if args.nproc < 2:
        p.error("need --nproc >= 2")
    rows = spawn_ranks(_rank, args.nproc, args)
    factor = 2 * (args.nproc - 1) / args.nproc
    print(f"# all_reduce sum float32, {args.nproc} ranks on one host, dist API; median of {args.rounds}"
          " alternating rounds, slowest rank; busbw GB/s")
    print(f"{'bytes':>12} {'arena us':>10} {'ordinary us':>12} {'gloo us':>10} {'arena bw':>9} {'ord bw':>8}"
          f" {'gloo bw':>8} {'ord/arena':>9} {'gloo/arena':>10}")
    for nbytes, m in rows:
        bw = {k: nbytes * factor / t / 1e9 for k, t in m.items()}
        print(f"{nbytes:>12} {m['arena'] * 1e6:>10.1f} {m['ordinary'] * 1e6:>12.1f} {m['gloo'] * 1e6:>10.1f}"
              f" {bw['arena']:>9.2f} {bw['ordinary']:>8.2f} {bw['gloo']:>8.2f} {m['ordinary'] / m['arena']:>9.2f}"
              f" {m['gloo'] / m['arena']:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
