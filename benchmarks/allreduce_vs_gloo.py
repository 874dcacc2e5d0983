"""fastcomm against Gloo, side by side in the same processes and the same run.

The default group is fastcomm; a second group over the same ranks is gloo.
For every size both are timed in alternating rounds (fastcomm/bench/harness.py:
machine noise hits both alike) and the table gives medians of the slowest
rank, bus bandwidth (the collective's nccl-tests factor, from
fastcomm/bench/collectives.py) and the ratio gloo_time / fastcomm_time (> 1:
fastcomm faster). Every size's result is checked once on both groups (exact
inputs, as fastcomm-bench does).

    python benchmarks/allreduce_vs_gloo.py                  # 2 ranks, float32 all_reduce, 8 B .. 64 MiB
    python benchmarks/allreduce_vs_gloo.py --sizes 8,1M,64M,256M
    python benchmarks/allreduce_vs_gloo.py -b 8 -e 4M -f 4    # a geometric series instead
    python benchmarks/allreduce_vs_gloo.py --nproc 3 --op all_gather --dtype bfloat16
    python benchmarks/allreduce_vs_gloo.py --reduce-op avg
    python benchmarks/allreduce_vs_gloo.py --api process_group   # without torch's Python wrapper (~5 us less per call)
    python benchmarks/allreduce_vs_gloo.py --nproc 4 --ranks-per-host 2   # two simulated hosts: hierarchical

The rows also go to a JSON record (benchmarks/results/allreduce_vs_gloo.json
unless --record PATH or --no-record; benchmarks/render.py turns records into
the docs' tables).

--api dist times torch.distributed's functions (what training code calls);
--api process_group calls each group's backend object directly
(`group._get_backend(cpu).allreduce([t]).wait()`), skipping torch's wrapper;
--api cpp loops in C++ (fastcomm._C.bench_loop, no Python in the loop): the
backend's own cost, the number nccl-tests and MPI benchmarks report.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys

import torch
import torch.distributed as dist

import results_record
from fastcomm.bench.cli import UsageError, parse_size, sizes
from fastcomm.bench.collectives import COLLECTIVES, DTYPES
from fastcomm.bench.harness import add_round_arguments, alternating_rounds, measured, spawn_ranks, timer_of

DEFAULT_SIZES = "8,64,512,4K,32K,256K,1M,4M,16M,64M"
TIMED = [name for name, spec in COLLECTIVES.items() if spec.c10d_op is not None]


def _timer(args, spec, buffers, group):
    """seconds-per-call timer of one prepared call on `group`, through --api."""
    if args.api == "dist":

        def call():
            for work in buffers.run(group, False):
                work.wait()

        return timer_of(call)
    backend = group._get_backend(torch.device("cpu"))
    if args.api == "process_group":
        return timer_of(lambda: spec.backend_call(backend, buffers, args.reduce_op, 0).wait())
    from fastcomm import _C

    return lambda iters: _C.bench_loop(backend, spec.c10d_op, buffers.send, buffers.recv, iters)


def _rank(rank: int, nproc: int, store, args) -> list[tuple]:
    import fastcomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    dist.init_process_group(
        "fastcomm", store=store, rank=rank, world_size=nproc, timeout=datetime.timedelta(seconds=120)
    )
    groups = {"fastcomm": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    control = groups["gloo"]
    spec = COLLECTIVES[args.op]
    dtype = DTYPES[args.dtype]
    rows = []
    for size in args.size_list:
        count = max(nproc if spec.split else 1, spec.count_for(size, dtype.itemsize, nproc))
        buffers = {
            name: spec.prepare(count, dtype, rank, nproc, args.reduce_op, 0, False, torch.device("cpu"))
            for name in groups
        }
        wrong = {}
        for name, group in groups.items():  # one checked call each before timing
            buffers[name].refill()
            for work in buffers[name].run(group, False):
                work.wait()
            wrong[name] = buffers[name].wrong()
        timers = {name: _timer(args, spec, buffers[name], group) for name, group in groups.items()}
        # fastcomm's barrier releases ranks within ~1 us of each other; Gloo's
        # leaves them up to ~0.3 ms apart, which a short loop would count.
        medians = alternating_rounds(
            timers,
            control,
            rounds=args.rounds,
            seconds=args.seconds,
            max_iters=args.max_iters,
            warmup_calls=args.warmup,
            align=lambda: dist.barrier(group=groups["fastcomm"]),
        )
        flags = torch.tensor([wrong["fastcomm"], wrong["gloo"]], dtype=torch.int64)
        dist.all_reduce(flags, group=control)
        nbytes = count * dtype.itemsize
        rows.append((nbytes, medians["fastcomm"], medians["gloo"], spec.bus_factor(nproc), *flags.tolist()))
        measured(rank, f"{nbytes} B")
    del buffers, timers  # drop the backend objects before the groups go (torch 2.14.1 aborted at exit otherwise)
    dist.destroy_process_group()
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_round_arguments(p, seconds=0.4, max_iters=100000, warmup=3)
    p.add_argument("--op", choices=TIMED, default="all_reduce", help="the collective")
    p.add_argument(
        "--reduce-op",
        choices=["sum", "prod", "min", "max", "avg"],
        default="sum",
        help="reduction of reducing collectives (--api cpp: sum only)",
    )
    p.add_argument("--dtype", choices=sorted(DTYPES), default="float")
    p.add_argument("--api", choices=["dist", "process_group", "cpp"], default="dist", help="see above")
    p.add_argument(
        "--ranks-per-host",
        type=int,
        default=0,
        help="FASTCOMM_RANKS_PER_HOST: consecutive blocks of this many ranks act as hosts",
    )
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="comma-separated sizes in bytes (K, M, G suffixes)")
    p.add_argument("-b", "--minbytes", help="with -e and -f: sizes b, b*f, ... up to e")
    p.add_argument("-e", "--maxbytes")
    p.add_argument("-f", "--stepfactor", type=int)
    results_record.add_arguments(p, "allreduce_vs_gloo")
    args = p.parse_args(argv)
    try:
        if args.minbytes is None and args.maxbytes is None and args.stepfactor is None:
            args.size_list = [parse_size(s) for s in args.sizes.split(",")]
        else:
            b, e = parse_size(args.minbytes or "8"), parse_size(args.maxbytes or "64M")
            f = args.stepfactor or 8
            if b < 1 or b > e or f < 2:
                p.error("need 1 <= minbytes <= maxbytes and stepfactor >= 2")
            args.size_list = sizes(b, e, f, 0)
    except UsageError as error:
        p.error(str(error))
    if args.nproc < 1 or min(args.size_list) < 1 or args.warmup < 1 or args.rounds < 1:
        p.error("need --nproc, sizes, --warmup and --rounds >= 1")
    if args.api == "cpp" and args.reduce_op != "sum":
        p.error("--api cpp loops the backends' default call: --reduce-op sum only")
    if args.ranks_per_host:
        os.environ["FASTCOMM_RANKS_PER_HOST"] = str(args.ranks_per_host)  # inherited by the spawned ranks
    rows = spawn_ranks(_rank, args.nproc, args)
    hosts = f"hosts of {args.ranks_per_host} (simulated)" if args.ranks_per_host else "one host"
    op = f" {args.reduce_op}" if COLLECTIVES[args.op].reduces else ""
    print(
        f"# {args.op}{op} {args.dtype}, {args.nproc} ranks on {hosts}, api {args.api}; "
        f"median of {args.rounds} alternating rounds, slowest rank"
    )
    print("# ratio = gloo time / fastcomm time (> 1: fastcomm faster); busbw in GB/s (1e9 B/s)")
    print(f"{'bytes':>12} {'fastcomm us':>12} {'gloo us':>12} {'fc busbw':>9} {'gloo busbw':>10} {'ratio':>7}")
    bad = 0
    for nbytes, t_fc, t_gl, factor, wrong_fc, wrong_gl in rows:
        bw = lambda t: nbytes * factor / t / 1e9  # noqa: E731
        note = "" if wrong_fc == wrong_gl == 0 else f"  WRONG: fastcomm {wrong_fc}, gloo {wrong_gl} elements"
        bad += wrong_fc + wrong_gl
        print(
            f"{int(nbytes):>12} {t_fc * 1e6:>12.1f} {t_gl * 1e6:>12.1f} {bw(t_fc):>9.3f} {bw(t_gl):>10.3f}"
            f" {t_gl / t_fc:>7.2f}{note}"
        )
    results_record.save(
        args,
        "allreduce_vs_gloo",
        [
            {
                "bytes": int(nbytes),
                "fastcomm_s": t_fc,
                "gloo_s": t_gl,
                "bus_factor": factor,
                "wrong_fastcomm": int(wrong_fc),
                "wrong_gloo": int(wrong_gl),
            }
            for nbytes, t_fc, t_gl, factor, wrong_fc, wrong_gl in rows
        ],
        script=__file__,
        argv=argv,
        drop=("size_list", "sizes", "minbytes", "maxbytes", "stepfactor"),
    )  # the rows give the sizes
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
