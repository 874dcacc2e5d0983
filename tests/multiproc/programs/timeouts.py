"""Timeout behaviour, one scenario per run: `python timeouts.py SCENARIO STORE_PATH`.

absent_peer: only rank 0 starts (world size 2); init_process_group must fail
             within the group timeout.
silent_peer: both ranks start; rank 1 never joins the all_reduce; rank 0's
             all_reduce must fail within the group timeout.
Prints 'RESULT <seconds> <error type>: <message>' for rank 0.
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import fastcomm  # noqa: F401

TIMEOUT = datetime.timedelta(seconds=3)


def _report(start: float, err: BaseException) -> None:
    first_line = str(err).strip().splitlines()[0][:300]
    print(f"RESULT {time.monotonic() - start:.2f} {type(err).__name__}: {first_line}", flush=True)


def absent_peer(store_path: str) -> None:
    start = time.monotonic()
    try:
        dist.init_process_group("fastcomm", init_method=f"file://{store_path}", rank=0, world_size=2, timeout=TIMEOUT)
    except Exception as err:  # noqa: BLE001  (the point is to see which error)
        _report(start, err)
        os._exit(0)
    print("RESULT no error", flush=True)
    os._exit(1)


def _silent_rank(rank: int, store_path: str) -> None:
    dist.init_process_group("fastcomm", init_method=f"file://{store_path}", rank=rank, world_size=2, timeout=TIMEOUT)
    if rank == 1:
        time.sleep(TIMEOUT.total_seconds() * 3)
        os._exit(0)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(4))
    except Exception as err:  # noqa: BLE001
        _report(start, err)
        os._exit(0)
    print("RESULT no error", flush=True)
    os._exit(1)


if __name__ == "__main__":
    scenario, path = sys.argv[1], sys.argv[2]
    if scenario == "absent_peer":
        absent_peer(path)
    else:
        mp.spawn(_silent_rank, args=(path,), nprocs=2, join=True)
