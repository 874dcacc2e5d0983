"""One run of benchmarks/peers/patterns.py's loops through torch.distributed (patterns.py starts it).

    python patterns_torch.py --backend fastcomm --nproc 2 --cells '[{"pattern": "pingpong", "size": 1024, "width_us": 0}]'

The calls are the ones training code makes: dist.all_reduce, dist.send,
dist.recv, dist.barrier, on CPU tensors, one thread per rank (`--api backend`:
the same ops on the backend object, without torch.distributed's layers). Rank 0 prints
one line: RESULT {"seconds": [per op, per cell], "neighbour_rate": ...}.
"""

import argparse
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pattern_loops  # noqa: E402
import torch_ranks  # noqa: E402


class TorchDistributed:
    """pattern_loops' calls through torch.distributed's functions (dist.all_reduce, dist.send, dist.recv)."""

    def new_buffer(self, count, value):
        return torch.full((count,), float(value))

    def all_reduce(self, buf):
        dist.all_reduce(buf)

    def send(self, buf, dst):
        dist.send(buf, dst)

    def recv(self, buf, src):
        dist.recv(buf, src)

    def barrier(self):
        dist.barrier()

    def max_over_ranks(self, x):
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())


class BackendObject(TorchDistributed):
    """The same ops on the backend object itself (`group._get_backend(cpu).allreduce([t]).wait()`):
    as thin a call as mpi4py's, without torch.distributed's Python and dispatcher layers; the
    difference from TorchDistributed is what torch's call costs."""

    def __init__(self):
        self.backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        self.blocking = torch_ranks.blocking_allreduce_options()

    def all_reduce(self, buf):
        self.backend.allreduce([buf], self.blocking).wait()

    def send(self, buf, dst):
        self.backend.send([buf], dst, 0).wait()

    def recv(self, buf, src):
        self.backend.recv([buf], src, 0).wait()


def _rank(rank: int, args, store_path: str) -> None:
    import fastcomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    dist.init_process_group(
        args.backend,
        init_method=f"file://{store_path}",
        rank=rank,
        world_size=args.nproc,
        timeout=datetime.timedelta(seconds=120),
    )
    lib = BackendObject() if args.api == "backend" else TorchDistributed()
    out = pattern_loops.run_cells(lib, rank, args.nproc, json.loads(args.cells), args.budget, args.seed)
    torch_ranks.report_and_leave(rank, out)


def main() -> None:
    p = argparse.ArgumentParser()
    torch_ranks.add_arguments(p)
    p.add_argument(
        "--api",
        choices=["dist", "backend"],
        default="dist",
        help="torch.distributed's functions, or the backend object",
    )
    p.add_argument("--cells", required=True, help="JSON list of cells (pattern_loops.run_cells)")
    p.add_argument("--budget", type=float, default=0.4, help="seconds per cell (about)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch_ranks.spawn(_rank, args, "fastcomm-patterns-")


if __name__ == "__main__":
    sys.exit(main())
