"""One run of benchmarks/peers/patterns.py's loops through mpi4py (patterns.py starts it under mpiexec).

    mpiexec -n 2 python patterns_mpi.py --cells '[{"pattern": "skew", "size": 8, "width_us": 50}]'

Rank 0 prints one line: RESULT {"seconds": [per op, per cell], "neighbour_rate": ...}.
"""

import argparse
import json
import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pattern_loops  # noqa: E402


class Mpi:
    """pattern_loops' calls, as mpi4py users write them (buffer methods on numpy arrays)."""

    def __init__(self):
        self.comm = MPI.COMM_WORLD

    def new_buffer(self, count, value):
        return np.full(count, value, dtype=np.float32)

    def all_reduce(self, buf):
        self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

    def send(self, buf, dst):
        self.comm.Send(buf, dest=dst)

    def recv(self, buf, src):
        self.comm.Recv(buf, source=src)

    def barrier(self):
        self.comm.Barrier()

    def max_over_ranks(self, x):
        return self.comm.allreduce(x, op=MPI.MAX)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--cells", required=True, help="JSON list of cells (pattern_loops.run_cells)")
    p.add_argument("--budget", type=float, default=0.4, help="seconds per cell (about)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    lib = Mpi()
    rank, n = lib.comm.Get_rank(), lib.comm.Get_size()
    out = pattern_loops.run_cells(lib, rank, n, json.loads(args.cells), args.budget, args.seed)
    if rank == 0:
        print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
