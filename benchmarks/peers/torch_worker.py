"""One round of a torch.distributed backend's all_reduce (benchmarks/peers/run.py starts it).

    python torch_worker.py --backend fastcomm --nproc 2 --sizes 8,1M --iters 50 --warmup 5 --settle 0.2 [--round-ms 100]

The same method as mpi_worker.py: in-place float32 SUM all_reduce; each
sample is the backend's own barrier (untimed) and one timed op; each sample's
slowest rank is found after the loop. `--api process_group` (default) calls the backend object
(`group._get_backend(cpu).allreduce([t]).wait()`, no torch wrapper: as thin as
mpi4py's call), `--api dist` calls dist.all_reduce, `--api cpp` loops barrier and
op in C++ (fastcomm._C.bench_samples: no Python between samples, the backend's own cost;
DeepSpeed's op keeps the Python loop). The slowest-rank reduce
runs once per size on a separate Gloo group. `--round-ms T`: more samples
until each size's loop lasts about T ms (rounds.py).

`--backend deepspeed`: DeepSpeed 0.19.8's shm all_reduce op
(deepspeed_shm.py) on a Gloo group, as deepspeed.comm runs it on CPU: its
barrier is the group's (Gloo's), the op torch.ops.deepspeed.inference_all_reduce_.
"""

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rounds  # noqa: E402
import torch_ranks  # noqa: E402


def _settle(rank: int, seconds: float, all_reduce) -> None:
    """Untimed all_reduces of one float until rank 0 has seen `seconds` pass
    (it contributes 1 then, the others 0: every rank sees the same sum and stops
    after the same op). Same in every worker (mpi_worker.py, oneccl_worker.cpp)."""
    flag = torch.zeros(1)
    start = time.perf_counter()
    while True:
        flag.fill_(1.0 if rank == 0 and time.perf_counter() - start >= seconds else 0.0)
        all_reduce(flag)
        if flag.item() > 0:
            return


def _max_over_ranks(n: int, group) -> int:
    value = torch.tensor([float(n)])
    dist.all_reduce(value, op=dist.ReduceOp.MAX, group=group)
    return int(value.item())


def _rank(rank: int, args, store_path: str) -> None:
    import fastcomm  # noqa: F401  (registers the backend)

    if args.pin:  # one core per rank, as Open MPI binds by default
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    torch.set_num_threads(1)
    deepspeed = args.backend == "deepspeed"
    dist.init_process_group(
        "gloo" if deepspeed else args.backend,
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=args.nproc,
        timeout=datetime.timedelta(seconds=120),
    )
    if deepspeed:
        import deepspeed_shm

        shm = deepspeed_shm.load()
        # its shared memory is named after MASTER_ADDR/PORT: unique per run
        os.environ.update(LOCAL_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=args.tag)
        shm.initialize(args.nproc, rank)
    control = dist.new_group(backend="gloo")
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    n = args.nproc
    if deepspeed:
        _settle(rank, args.settle, lambda flag: torch.ops.deepspeed.inference_all_reduce_(flag))
    else:
        _settle(rank, args.settle, lambda flag: backend.allreduce([flag]).wait())
    out = {"loop_seconds": {}}  # per size: the sample loop's wall time, barriers included (timeline.py)
    for size in [int(s) for s in args.sizes.split(",")]:
        count = max(1, size // 4)
        t = torch.full((count,), float(rank + 1))
        dist.all_reduce(t)
        assert bool((t == n * (n + 1) / 2).all()), "wrong all_reduce result"
        if deepspeed:
            op = lambda: torch.ops.deepspeed.inference_all_reduce_(t)  # noqa: E731
            op()
            t.fill_(rank + 1)
            op()
            assert bool((t == n * (n + 1) / 2).all()), "wrong deepspeed all_reduce result"
        elif args.api == "dist":
            op = lambda: dist.all_reduce(t)  # noqa: E731
        else:
            blocking = torch_ranks.blocking_allreduce_options()
            op = lambda: backend.allreduce([t], blocking).wait()  # noqa: E731
        for _ in range(args.warmup):
            op()
        if args.api == "cpp" and not deepspeed:  # barrier and op looped in C++: the backend's own cost
            take = lambda k: fastcomm._C.bench_samples(backend, "ALLREDUCE", t, t, k)  # noqa: E731
        else:
            # process_group: the backend object's barrier too, as thin as mpi4py's Barrier
            barrier = dist.barrier if args.api == "dist" or deepspeed else lambda: backend.barrier().wait()

            def take(k: int) -> list[float]:
                samples = []  # a list, not a tensor: a tensor's item assignment costs ~5 us of Python per sample
                for _ in range(k):
                    barrier()
                    t0 = time.perf_counter()
                    op()
                    samples.append(time.perf_counter() - t0)
                barrier()  # untimed: no rank leaves while a peer still finishes its last op (bench_samples does too)
                return samples

        start = time.perf_counter()
        samples = rounds.take_round(take, lambda n: _max_over_ranks(n, control), rank, args)
        out["loop_seconds"][str(count * 4)] = time.perf_counter() - start
        mine = torch.tensor(samples, dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX, group=control)  # each sample's slowest rank, after the loop
        out[str(count * 4)] = mine.tolist()
    torch_ranks.report_and_leave(rank, out)


def main() -> None:
    p = argparse.ArgumentParser()
    torch_ranks.add_arguments(p)
    p.add_argument("--api", choices=["process_group", "dist", "cpp"], default="process_group")
    p.add_argument("--sizes", required=True)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    rounds.add_arguments(p)
    p.add_argument(
        "--settle", type=float, default=0.2, help="seconds of untimed small all_reduces before the first size"
    )
    p.add_argument("--pin", action="store_true", help="bind rank r to the r-th CPU it may use (mod their number)")
    args = p.parse_args()
    args.tag = str(20000 + os.getpid() % 40000)  # names deepspeed's shared memory
    torch_ranks.spawn(_rank, args, "fastcomm-peers-")


if __name__ == "__main__":
    sys.exit(main())
