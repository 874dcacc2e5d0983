"""One round of the peers' all_reduce under mpiexec (benchmarks/peers/run.py starts it).

    mpiexec -n 2 python mpi_worker.py --sizes 8,1M --iters 50 --warmup 5 --settle 0.2 [--round-ms 100]

For each size: in-place float32 SUM Allreduce with mpi4py on numpy buffers;
every sample is the library's own barrier (untimed) and one timed op; each
sample's slowest rank is found after the loop (a MAX reduce of all samples),
so nothing but the barrier runs between samples. Rank 0 prints one JSON line:
{"size": [seconds per sample, ...], ...}. The result is checked once per size.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rounds  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", required=True, help="bytes, comma-separated")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    rounds.add_arguments(p)
    p.add_argument(
        "--settle", type=float, default=0.2, help="seconds of untimed small all_reduces before the first size"
    )
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    rank, n = comm.Get_rank(), comm.Get_size()
    # Settle (as torch_worker.py's _settle): untimed Allreduces of one float
    # until rank 0 has seen --settle seconds pass.
    flag = np.zeros(1, dtype=np.float32)
    start = time.perf_counter()
    while True:
        flag[0] = 1.0 if rank == 0 and time.perf_counter() - start >= args.settle else 0.0
        comm.Allreduce(MPI.IN_PLACE, flag, op=MPI.SUM)
        if flag[0] > 0:
            break
    out = {}
    for size in [int(s) for s in args.sizes.split(",")]:
        count = max(1, size // 4)
        buf = np.full(count, rank + 1, dtype=np.float32)
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
        assert (buf == n * (n + 1) / 2).all(), "wrong all_reduce result"
        for _ in range(args.warmup):
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

        def take(k: int) -> np.ndarray:
            mine = np.zeros(k)
            for i in range(k):
                comm.Barrier()
                t0 = time.perf_counter()
                comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
                mine[i] = time.perf_counter() - t0
            comm.Barrier()  # untimed: no rank leaves while a peer still finishes its last op (see torch_worker.py)
            return mine

        mine = np.array(rounds.take_round(take, lambda n: comm.allreduce(n, op=MPI.MAX), rank, args))
        slowest = np.zeros(len(mine))
        comm.Reduce(mine, slowest, op=MPI.MAX, root=0)  # per sample, after the loop: nothing else between samples
        out[str(count * 4)] = slowest.tolist()
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
