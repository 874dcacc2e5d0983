"""A collective that fails inside a training step must raise on the surviving
rank, never return: `python comm_failures.py FAULT STORE_PATH RANK CASE [CASE ...]`,
one process per rank.

CASE: a hook of fastcomm.hooks.HOOK_NAMES (a DDP model with it registered;
its backward pass fails), "syncbn" (fastcomm.nn.SyncBatchNorm's backward
all_reduce fails), "model_sync" (ModelSync.step(): all_reduce),
"model_sync_int8" (incremental, int8: all_gather), "model_sync_async"
(async_op: the failure surfaces at finish()).

FAULT: how the peer misses the collective.
  late  world size 2: rank 1 is the peer of every case and joins each case's
        failing step only after rank 0 has given up on it (the case's group
        timeout, 10 s, has passed).
  kill  world size 1 + the number of cases: rank i + 1 is the peer of case i
        and SIGKILLs itself instead of joining its failing step. The groups'
        timeout is long (60 s): peers wait in their case's first collective
        while rank 0 runs the cases before it; the engine notices a dead
        peer by its pid, not by a timeout.
Each case runs on a group of its own (rank 0 and its peer), after one good
step on it, so one case's failure leaves the next case's group intact.

Rank 0 prints 'RESULT <case> raised <error type>: <message>' or
'RESULT <case> returned' per case, then 'DONE'; a rank that fails outside the
failing steps prints 'FAILED <rank> <traceback tail>'.
"""

from __future__ import annotations

import datetime
import os
import signal
import sys
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

import fastcomm
import fastcomm.hooks
import fastcomm.nn
import fastcomm.sync

CASE_TIMEOUT = {"late": datetime.timedelta(seconds=10), "kill": datetime.timedelta(seconds=60)}
SETUP_TIMEOUT = datetime.timedelta(seconds=120)  # start-up and hand-offs: many ranks start on few CPUs
HOOK_OPTIONS = {"powersgd": {"start_powerSGD_iter": 0}}  # compressed steps (the default starts after 1000)
SYNC_OPTIONS = {
    "model_sync": {},
    "model_sync_int8": {"mode": "incremental", "compression": "int8"},
    "model_sync_async": {"async_op": True},
}


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())  # one write per line: ranks share the pipe


class _Backward:
    """A training step whose backward pass communicates. forward() runs on every
    rank before the fault (DDP's forward communicates too); step() is the
    backward pass. The object keeps the model, and with it DDP's reducer, alive:
    a backward pass through a collected DDP never communicates."""

    def __init__(self, model: nn.Module, features: int) -> None:
        self.model = model
        self.features = features
        self.loss: torch.Tensor | None = None

    def forward(self) -> None:
        self.loss = self.model(torch.randn(8, self.features)).square().mean()

    def step(self) -> None:
        self.loss.backward()


class _Sync:
    """ModelSync's step (period 1: every step synchronises), then finish(),
    which applies an asynchronous sync."""

    def __init__(self, sync: fastcomm.sync.ModelSync) -> None:
        self.sync = sync

    def forward(self) -> None:
        pass

    def step(self) -> None:
        self.sync.step()
        self.sync.finish()


def _case(name: str, group: dist.ProcessGroup) -> _Backward | _Sync:
    """Case `name` on `group`, after one good step."""
    torch.manual_seed(0)
    if name in fastcomm.hooks.HOOK_NAMES:
        ddp = DDP(nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4)), process_group=group)
        fastcomm.hooks.register(ddp, name, process_group=group, **HOOK_OPTIONS.get(name, {}))
        case = _Backward(ddp, 16)
    elif name == "syncbn":
        # the Linear needs the input gradient, so SyncBatchNorm's backward all_reduce runs
        case = _Backward(nn.Sequential(nn.Linear(6, 4), fastcomm.nn.SyncBatchNorm(4, process_group=group)), 6)
    else:
        case = _Sync(fastcomm.sync.ModelSync(nn.Linear(16, 8), period=1, process_group=group, **SYNC_OPTIONS[name]))
    case.forward()
    case.step()
    return case


def _survivor(fault: str, cases: list[str], groups: list[dist.ProcessGroup]) -> None:
    for name, group in zip(cases, groups):
        case = _case(name, group)
        case.forward()
        try:
            case.step()
        except Exception as err:  # noqa: BLE001  (the point is to see which error)
            _say(f"RESULT {name} raised {type(err).__name__}: {' '.join(str(err).split())[:2000]}")
        else:
            _say(f"RESULT {name} returned")
        if fault == "late":
            dist.barrier()  # on the default group: the peer starts its step now
            dist.barrier()  # the peer is done with this case
    _say("DONE")


def _peer(fault: str, rank: int, cases: list[str], groups: list[dist.ProcessGroup]) -> None:
    for i in range(len(cases)) if fault == "late" else [rank - 1]:
        case = _case(cases[i], groups[i])
        case.forward()
        if fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        dist.barrier()  # rank 0 has given up on the step
        try:
            case.step()  # rank 0 has left this collective: how it ends here is not checked
        except Exception:  # noqa: BLE001
            pass
        dist.barrier()


def main() -> None:
    fault, store_path, rank, cases = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    assert fault in ("late", "kill"), fault
    world_size = 2 if fault == "late" else 1 + len(cases)
    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("fastcomm", store=store, rank=rank, world_size=world_size, timeout=SETUP_TIMEOUT)
    try:
        # every rank makes every group, in one order (a rank outside a group gets a placeholder)
        groups = [
            dist.new_group([0, 1 if fault == "late" else i + 1], timeout=CASE_TIMEOUT[fault]) for i in range(len(cases))
        ]
        if rank == 0:
            _survivor(fault, cases, groups)
        else:
            _peer(fault, rank, cases, groups)
    except BaseException:  # noqa: BLE001  (reported for the test's message)
        _say(f"FAILED {rank} " + " | ".join(traceback.format_exc().splitlines()[-3:]))
    os._exit(0)  # no teardown: the cases' groups are broken by design


if __name__ == "__main__":
    main()
