"""fastcomm against Gloo, side by side in the same processes and the same run.

The default group is fastcomm; a second group over the same ranks is gloo.
For every size both are timed in alternating rounds (so machine noise hits
both alike) and the table gives medians, bus bandwidth (nccl-tests' factor for
the collective) and the ratio gloo_time / fastcomm_time (> 1: fastcomm faster).

    python benchmarks/allreduce_vs_gloo.py                  # 2 ranks, float32 all_reduce, 8 B .. 64 MiB
    python benchmarks/allreduce_vs_gloo.py --nproc 3 --op all_gather --dtype bfloat16
"""
from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = {
    # name: (busbw factor given n, function(tensor, out, group))
    "all_reduce": (lambda n: 2 * (n - 1) / n, lambda t, out, g: dist.all_reduce(t, group=g)),
    "all_reduce_avg": (lambda n: 2 * (n - 1) / n, lambda t, out, g: dist.all_reduce(t, op=dist.ReduceOp.AVG, group=g)),
    "all_gather": (lambda n: (n - 1) / n, lambda t, out, g: dist.all_gather_into_tensor(out, t, group=g)),
    "broadcast": (lambda n: 1.0, lambda t, out, g: dist.broadcast(t, src=0, group=g)),
    "all_to_all": (lambda n: (n - 1) / n, lambda t, out, g: dist.all_to_all_single(out, t, group=g)),
}
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64, "int32": torch.int32}


def _sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(s)
        s *= factor
    return sizes


def _time_op(fn, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


def _worker(rank: int, args, store_path: str, result_path: str) -> None:
    import fastcomm  # noqa: F401

    torch.set_num_threads(1)
    store = dist.FileStore(store_path, args.nproc)
    dist.init_process_group("fastcomm", store=store, rank=rank, world_size=args.nproc, timeout=datetime.timedelta(seconds=120))
    gloo = dist.new_group(backend="gloo")
    fastcomm_group = dist.group.WORLD
    n = args.nproc
    factor, op = OPS[args.op]
    dtype = DTYPES[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    rows = []
    for size in _sizes(args.minbytes, args.maxbytes, args.stepfactor):
        count = max(n, size // elem // n * n)
        t = torch.ones(count, dtype=dtype)
        out = torch.empty(count * n if args.op == "all_gather" else count, dtype=dtype)
        # iterations: enough for ~args.seconds per measurement at the estimated speed
        fn_fc = lambda: op(t, out, fastcomm_group)
        fn_gl = lambda: op(t, out, gloo)
        for fn in (fn_fc, fn_gl):
            for _ in range(args.warmup):
                fn()
        probe = torch.tensor([_time_op(fn_gl, 2)])
        dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=gloo)  # same iteration count on every rank
        iters = int(min(args.max_iters, max(3, args.seconds / args.rounds / max(probe.item(), 1e-7))))
        samples = {"fastcomm": [], "gloo": []}
        for _ in range(args.rounds):
            dist.barrier(group=gloo)
            samples["fastcomm"].append(_time_op(fn_fc, iters))
            dist.barrier(group=gloo)
            samples["gloo"].append(_time_op(fn_gl, iters))
        med = {k: torch.tensor([statistics.median(v)]) for k, v in samples.items()}
        for v in med.values():
            dist.all_reduce(v, op=dist.ReduceOp.MAX, group=gloo)  # the slowest rank defines the time
        nbytes = count * elem
        rows.append((nbytes, med["fastcomm"].item(), med["gloo"].item(), factor(n)))
        if rank == 0:
            print(f"  measured {nbytes} B", file=sys.stderr, flush=True)
    if rank == 0:
        with open(result_path, "w") as f:
            for r in rows:
                f.write(" ".join(map(str, r)) + "\n")
    dist.destroy_process_group()


def _parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper()
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--op", choices=sorted(OPS), default="all_reduce")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    p.add_argument("-b", "--minbytes", type=_parse_size, default=8)
    p.add_argument("-e", "--maxbytes", type=_parse_size, default=64 << 20)
    p.add_argument("-f", "--stepfactor", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5, help="alternating fastcomm/gloo rounds per size")
    p.add_argument("--seconds", type=float, default=0.4, help="target time per size and backend")
    p.add_argument("--max-iters", type=int, default=2000)
    args = p.parse_args(argv)
    if args.nproc < 1 or args.minbytes < 1 or args.minbytes > args.maxbytes or args.stepfactor < 2:
        p.error("need --nproc >= 1, 1 <= minbytes <= maxbytes and stepfactor >= 2")
    with tempfile.TemporaryDirectory(prefix="fastcomm-bench-") as tmp:
        result = os.path.join(tmp, "result")
        mp.spawn(_worker, args=(args, os.path.join(tmp, "store"), result), nprocs=args.nproc)
        rows = [tuple(map(float, line.split())) for line in open(result)]
    print(f"# {args.op} {args.dtype}, {args.nproc} ranks on one host; median of {args.rounds} alternating rounds")
    print(f"# ratio = gloo time / fastcomm time (> 1: fastcomm faster); busbw in GB/s (1e9 B/s)")
    print(f"{'bytes':>12} {'fastcomm us':>12} {'gloo us':>12} {'fc busbw':>9} {'gloo busbw':>10} {'ratio':>7}")
    for nbytes, t_fc, t_gl, factor in rows:
        bw = lambda t: nbytes * factor / t / 1e9
        print(f"{int(nbytes):>12} {t_fc * 1e6:>12.1f} {t_gl * 1e6:>12.1f} {bw(t_fc):>9.3f} {bw(t_gl):>10.3f} {t_gl / t_fc:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
