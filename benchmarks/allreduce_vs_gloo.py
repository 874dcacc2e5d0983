"""fastcomm against Gloo, side by side in the same processes and the same run.

The default group is fastcomm; a second group over the same ranks is gloo.
For every size both are timed in alternating rounds (so machine noise hits
both alike) and the table gives medians, bus bandwidth (nccl-tests' factor for
the collective) and the ratio gloo_time / fastcomm_time (> 1: fastcomm faster).

    python benchmarks/allreduce_vs_gloo.py                  # 2 ranks, float32 all_reduce, 8 B .. 64 MiB
    python benchmarks/allreduce_vs_gloo.py --sizes 8,1M,64M,256M
    python benchmarks/allreduce_vs_gloo.py -b 8 -e 4M -f 4    # a geometric series instead
    python benchmarks/allreduce_vs_gloo.py --nproc 3 --op all_gather --dtype bfloat16
    python benchmarks/allreduce_vs_gloo.py --api process_group   # without torch's Python wrapper (~5 us less per call)
    python benchmarks/allreduce_vs_gloo.py --nproc 4 --ranks-per-host 2   # two simulated hosts: hierarchical

--api dist times torch.distributed's functions (what training code calls);
--api process_group calls each group's backend object directly
(`group._get_backend(cpu).allreduce([t]).wait()`), skipping torch's wrapper;
--api cpp loops in C++ (fastcomm._C.bench_loop, no Python in the loop): the
backend's own cost, the number nccl-tests and MPI benchmarks report.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import os
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

OPS = {
    # name: (busbw factor given n, function(tensor, out, group)); t holds `bytes`
    # (the full buffer, as in nccl-tests), out is sized by _output_count.
    "all_reduce": (lambda n: 2 * (n - 1) / n, lambda t, out, g: dist.all_reduce(t, group=g)),
    "all_reduce_avg": (lambda n: 2 * (n - 1) / n, lambda t, out, g: dist.all_reduce(t, op=dist.ReduceOp.AVG, group=g)),
    "all_gather": (lambda n: (n - 1) / n, lambda t, out, g: dist.all_gather_into_tensor(out, t, group=g)),
    "reduce_scatter": (lambda n: (n - 1) / n, lambda t, out, g: dist.reduce_scatter_tensor(out, t, group=g)),
    "broadcast": (lambda n: 1.0, lambda t, out, g: dist.broadcast(t, src=0, group=g)),
    "reduce": (lambda n: 1.0, lambda t, out, g: dist.reduce(t, dst=0, group=g)),
    "all_to_all": (lambda n: (n - 1) / n, lambda t, out, g: dist.all_to_all_single(out, t, group=g)),
}


_CPU_BACKENDS = {}  # group -> its CPU backend object, looked up once (the lookup costs ~3 us)


def _cpu_backend(group):
    backend = _CPU_BACKENDS.get(group)
    if backend is None:
        backend = _CPU_BACKENDS[group] = group._get_backend(torch.device("cpu"))
    return backend


def _backend_op(name: str):
    """The same op on the group's backend object, skipping torch's Python wrapper."""
    def avg():
        options = dist.AllreduceOptions()
        options.reduceOp = dist.ReduceOp.AVG
        return options

    def root0(kind):
        options = kind()
        options.rootRank = 0
        return options

    calls = {
        "all_reduce": lambda b, t, out: b.allreduce([t]),
        "all_reduce_avg": lambda b, t, out: b.allreduce([t], avg()),
        "all_gather": lambda b, t, out: b._allgather_base(out, t),
        "reduce_scatter": lambda b, t, out: b._reduce_scatter_base(out, t),
        "broadcast": lambda b, t, out: b.broadcast([t], root0(dist.BroadcastOptions)),
        "reduce": lambda b, t, out: b.reduce([t], root0(dist.ReduceOptions)),
        "all_to_all": lambda b, t, out: b.alltoall_base(out, t, [], []),
    }
    call = calls[name]
    return lambda t, out, g: call(_cpu_backend(g), t, out).wait()


def _cpp_op(name: str):
    """The same op looped in C++; returns a function(t, out, group, iters) -> seconds per call."""
    from fastcomm import _C

    if name not in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all"):
        raise SystemExit(f"--api cpp does not time {name}")
    return lambda t, out, g, iters: _C.bench_loop(_cpu_backend(g), name, t, out, iters)


def _output_count(op: str, count: int, n: int) -> int:
    return {"all_gather": count * n, "reduce_scatter": count // n}.get(op, count)


DEFAULT_SIZES = "8,64,512,4K,32K,256K,1M,4M,16M,64M"
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
    if args.api == "process_group":
        op = _backend_op(args.op)
    timer = _time_op
    if args.api == "cpp":
        loop = _cpp_op(args.op)
        op = lambda t, out, g: loop(t, out, g, 1)
        timer = lambda fn, iters: loop(*fn.args, iters)
    dtype = DTYPES[args.dtype]
    elem = torch.tensor([], dtype=dtype).element_size()
    rows = []
    for size in args.size_list:
        count = max(n, size // elem // n * n)
        t = torch.ones(count, dtype=dtype)
        out = torch.empty(_output_count(args.op, count, n), dtype=dtype)
        fn_fc = functools.partial(op, t, out, fastcomm_group)
        fn_gl = functools.partial(op, t, out, gloo)
        for fn in (fn_fc, fn_gl):
            # --warmup calls, then more up to ~20 ms (the same count on every rank):
            # the first size otherwise pays for cold caches and page faults.
            extra = torch.tensor([0.02 / _time_op(fn, args.warmup)])
            dist.all_reduce(extra, op=dist.ReduceOp.MAX, group=gloo)
            _time_op(fn, int(min(extra.item(), 10000)) + 1)
        # Each backend gets enough iterations for ~seconds/rounds per round at
        # its own speed (the same count on every rank).
        iters = {}
        for name, fn in (("fastcomm", fn_fc), ("gloo", fn_gl)):
            probe = torch.tensor([timer(fn, 3)])
            dist.all_reduce(probe, op=dist.ReduceOp.MAX, group=gloo)
            iters[name] = int(min(args.max_iters, max(3, args.seconds / args.rounds / max(probe.item(), 1e-7))))
        samples = {"fastcomm": [], "gloo": []}
        for _ in range(args.rounds):
            for name, fn in (("fastcomm", fn_fc), ("gloo", fn_gl)):
                # Start every round aligned: fastcomm's barrier releases ranks within
                # ~1 us of each other; Gloo's leaves them up to ~0.3 ms apart, which
                # a short loop would count as collective time.
                dist.barrier(group=gloo)
                dist.barrier(group=fastcomm_group)
                samples[name].append(timer(fn, iters[name]))
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
    # Drop the cached backend objects first, so they are destroyed inside
    # destroy_process_group like any group's, not at interpreter exit (there,
    # torch 2.14.1 aborted with "terminate called without an active exception"
    # in about 1 of 5 runs).
    _CPU_BACKENDS.clear()
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
    p.add_argument("--api", choices=["dist", "process_group", "cpp"], default="dist", help="see above")
    p.add_argument("--ranks-per-host", type=int, default=0,
                   help="FASTCOMM_RANKS_PER_HOST: consecutive blocks of this many ranks act as hosts")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated sizes in bytes (K, M, G suffixes)")
    p.add_argument("-b", "--minbytes", type=_parse_size, help="with -e and -f: sizes b, b*f, ... up to e")
    p.add_argument("-e", "--maxbytes", type=_parse_size)
    p.add_argument("-f", "--stepfactor", type=int)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--rounds", type=int, default=5, help="alternating fastcomm/gloo rounds per size")
    p.add_argument("--seconds", type=float, default=0.4, help="target time per size and backend")
    p.add_argument("--max-iters", type=int, default=100000)
    args = p.parse_args(argv)
    if args.minbytes is None and args.maxbytes is None and args.stepfactor is None:
        args.size_list = [_parse_size(s) for s in args.sizes.split(",")]
    else:
        b, e, f = args.minbytes or 8, args.maxbytes or 64 << 20, args.stepfactor or 8
        if b < 1 or b > e or f < 2:
            p.error("need 1 <= minbytes <= maxbytes and stepfactor >= 2")
        args.size_list = _sizes(b, e, f)
    if args.nproc < 1 or min(args.size_list) < 1 or args.warmup < 1 or args.rounds < 1:
        p.error("need --nproc, sizes, --warmup and --rounds >= 1")
    if args.ranks_per_host:
        os.environ["FASTCOMM_RANKS_PER_HOST"] = str(args.ranks_per_host)  # inherited by the spawned ranks
    with tempfile.TemporaryDirectory(prefix="fastcomm-bench-") as tmp:
        result = os.path.join(tmp, "result")
        mp.spawn(_worker, args=(args, os.path.join(tmp, "store"), result), nprocs=args.nproc)
        rows = [tuple(map(float, line.split())) for line in open(result)]
    hosts = f"hosts of {args.ranks_per_host} (simulated)" if args.ranks_per_host else "one host"
    print(f"# {args.op} {args.dtype}, {args.nproc} ranks on {hosts}, api {args.api}; "
          f"median of {args.rounds} alternating rounds")
    print(f"# ratio = gloo time / fastcomm time (> 1: fastcomm faster); busbw in GB/s (1e9 B/s)")
    print(f"{'bytes':>12} {'fastcomm us':>12} {'gloo us':>12} {'fc busbw':>9} {'gloo busbw':>10} {'ratio':>7}")
    for nbytes, t_fc, t_gl, factor in rows:
        bw = lambda t: nbytes * factor / t / 1e9
        print(f"{int(nbytes):>12} {t_fc * 1e6:>12.1f} {t_gl * 1e6:>12.1f} {bw(t_fc):>9.3f} {bw(t_gl):>10.3f} {t_gl / t_fc:>7.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
