"""The segment's creator SIGKILLed at one step of the engine's set-up
(fastcomm/_shm.py), one step per run:
`python setup_kills.py STEP STORE_PATH`.

Three ranks; rank 0 creates its host's segment. STEP is where it dies:
  after_host_keys   every rank has published its host key, nothing is created;
  after_create      the memfd exists, its path is not published yet;
  before_attach     the path is published; a peer kills rank 0 just before opening it;
  after_attach      a peer has mapped the segment; it kills rank 0 right after;
  during_statuses   rank 0 dies while waiting for every rank's status;
  during_leaders    (hosts of 2 and 1 ranks) rank 0 dies while making the leaders' Gloo group;
  after_setup       init_process_group returned everywhere; rank 0 dies before the first all_reduce.
The kills are made by wrapping fastcomm._shm's functions in this process only.
Every live rank prints 'RESULT <rank> <seconds> <error type>: <message>' or
'RESULT <rank> ok' and 'SHM <rank> <entries in /dev/shm>'; the parent prints
'SHM_BEFORE <n>' and 'SHM_AFTER <n>' (entries in /dev/shm before the ranks
start and after every rank has ended).
"""

import datetime
import os
import signal
import sys
import time
import types

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

GROUP_TIMEOUT = 4.0
WORLD_SIZE = 3


def _say(line: str) -> None:
    os.write(1, (line + "\n").encode())  # one write per line: ranks share the pipe


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _creator_pid(segment_name: str) -> int:
    return int(segment_name.split("/")[2])  # /proc/<pid>/fd/<fd>


def _arm(step: str, rank: int) -> None:
    """Wraps fastcomm._shm's functions so that rank 0 dies at `step`."""
    from fastcomm import _shm

    real_c, real_get_all, real_make_gloo = _shm._C, _shm._get_all, _shm.make_gloo

    def get_all(store, kind, ranks, clock):
        if rank == 0 and (
            (step == "after_host_keys" and kind == "host") or (step == "during_statuses" and kind == "status")
        ):
            if kind == "host":
                real_get_all(store, kind, ranks, clock)  # every rank has published: then die
            _die()
        return real_get_all(store, kind, ranks, clock)

    class Engine:
        @staticmethod
        def create(*args):
            engine = real_c.ShmEngine.create(*args)
            if step == "after_create":
                _die()
            return engine

        @staticmethod
        def attach(name, *args):
            if step == "before_attach":
                os.kill(_creator_pid(name), signal.SIGKILL)
                time.sleep(0.5)  # let it die
            engine = real_c.ShmEngine.attach(name, *args)
            if step == "after_attach":
                os.kill(_creator_pid(name), signal.SIGKILL)
            return engine

    def make_gloo(*args, **kwargs):
        if step == "during_leaders" and rank == 0:
            _die()
        return real_make_gloo(*args, **kwargs)

    _shm._C = types.SimpleNamespace(
        ShmEngine=Engine, set_cpu_binding=real_c.set_cpu_binding, set_home_cpu=real_c.set_home_cpu
    )
    _shm._get_all = get_all
    _shm.make_gloo = make_gloo


def _rank(rank: int, step: str, store_path: str) -> None:
    if step == "during_leaders":
        os.environ["FASTCOMM_RANKS_PER_HOST"] = "2"
    import fastcomm  # noqa: F401

    _arm(step, rank)
    start = time.monotonic()
    try:
        dist.init_process_group(
            "fastcomm",
            init_method=f"file://{store_path}",
            rank=rank,
            world_size=WORLD_SIZE,
            timeout=datetime.timedelta(seconds=GROUP_TIMEOUT),
        )
        if step == "after_setup" and rank == 0:
            _die()
        dist.all_reduce(torch.ones(4))
        _say(f"RESULT {rank} ok")
    except Exception as err:  # noqa: BLE001  (the point is to see which error)
        first_line = str(err).strip().splitlines()[0][:300] if str(err).strip() else ""
        _say(f"RESULT {rank} {time.monotonic() - start:.2f} {type(err).__name__}: {first_line}")
    _say(f"SHM {rank} {len(os.listdir('/dev/shm'))}")
    os._exit(0)  # no destroy: the group is broken; exiting must release everything anyway


def main() -> None:
    step, store_path = sys.argv[1], sys.argv[2]
    _say(f"SHM_BEFORE {len(os.listdir('/dev/shm'))}")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank, args=(r, step, store_path)) for r in range(WORLD_SIZE)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=90)
        if p.is_alive():
            p.kill()
            _say("HUNG")
    _say(f"SHM_AFTER {len(os.listdir('/dev/shm'))}")


if __name__ == "__main__":
    main()
