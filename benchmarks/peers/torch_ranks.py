"""What the torch.distributed workers (torch_worker.py, patterns_torch.py)
share: their common flags, spawning the ranks over a file store, the options
of a blocking all_reduce on the backend object, and the one line of results
rank 0 prints before every rank leaves the group."""

from __future__ import annotations

import json
import os
import tempfile


def add_arguments(parser) -> None:
    """--backend and --nproc."""
    parser.add_argument("--backend", required=True)
    parser.add_argument("--nproc", type=int, default=2)


def spawn(rank_fn, args, prefix: str) -> None:
    """rank_fn(rank, args, store_path) on args.nproc new processes."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        mp.spawn(rank_fn, args=(args, os.path.join(tmp, "store")), nprocs=args.nproc)


def blocking_allreduce_options():
    """AllreduceOptions of a call waited for at once (asyncOp false), as
    dist.all_reduce passes them: the backend object then takes the path users'
    blocking calls take."""
    import torch.distributed as dist

    options = dist.AllreduceOptions()
    options.asyncOp = False
    return options


def report_and_leave(rank: int, out: dict) -> None:
    """Rank 0 prints `RESULT <json>` in one write (lines of several ranks never
    interleave); then every rank destroys its process group."""
    import torch.distributed as dist

    if rank == 0:
        os.write(1, ("RESULT " + json.dumps(out) + "\n").encode())
    dist.destroy_process_group()
