"""Ranks as processes: a pool of `world_size` workers that share one fastcomm
default group and run check functions on request.

Starting a rank costs seconds (importing torch), so a pool lives for a whole
pytest session per world size and runs many checks. A check is a module-level
function ``check(rank, world_size, **kwargs)`` run on every rank at once; it
asserts values itself and may return something picklable. If any rank raises,
``RankPool.run`` raises AssertionError with every failing rank's traceback. After
a failure, and when a check does not finish within its timeout, the pool is
marked broken (its processes are killed) and the fixture makes a new one for the
next test: a rank that stopped early skipped collectives its peers then waited
for, so the group is out of step and later checks on it would fail too.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import tempfile
import traceback
from datetime import timedelta
from typing import Any, Callable

GROUP_TIMEOUT = timedelta(seconds=60)


def _worker(rank: int, world_size: int, store_path: str, env: dict, commands, results) -> None:
    os.environ.update(env)
    import torch
    import torch.distributed as dist

    import fastcomm  # noqa: F401  (registers the backend)

    torch.set_num_threads(1)
    store = dist.FileStore(store_path, world_size)
    dist.init_process_group("fastcomm", store=store, rank=rank, world_size=world_size, timeout=GROUP_TIMEOUT)
    while True:
        item = commands.get()
        if item is None:
            break
        fn, kwargs = item
        try:
            results.put((rank, "ok", fn(rank, world_size, **kwargs)))
        except BaseException:  # report everything, keep serving
            results.put((rank, "error", traceback.format_exc()))
    dist.destroy_process_group()


def single_copy_env(world_size: int) -> tuple:
    """The env of the pools that test the single-copy algorithms (plain and
    low-precision all_reduce) from 256 KiB to 4 MiB: by default they start at
    32 KiB where ranks have a CPU each and are off where ranks outnumber CPUs
    (3 and 4 ranks here). 2 ranks also queue from 64 KiB (the op queue). One
    definition, so the tests that use it share the pools (each pool's ranks
    stay alive for the session: more pools, more memory)."""
    env = (
        ("FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES", str(256 << 10)),
        ("FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MAX_BYTES", str(4 << 20)),
    )
    if world_size == 2:
        env += (("FASTCOMM_SHM_ASYNC_MIN_BYTES", "65536"),)
    return env


class RankPool:
    def __init__(self, world_size: int, env: dict | None = None) -> None:
        self.world_size = world_size
        self.broken = False
        ctx = mp.get_context("spawn")
        self._dir = tempfile.TemporaryDirectory(prefix="fastcomm-test-")
        store_path = os.path.join(self._dir.name, "store")
        self._commands = [ctx.Queue() for _ in range(world_size)]
        self._results = ctx.Queue()
        self._procs = [
            ctx.Process(
                target=_worker,
                args=(r, world_size, store_path, dict(env or {}), self._commands[r], self._results),
                daemon=True,
            )
            for r in range(world_size)
        ]
        for p in self._procs:
            p.start()

    def run(self, fn: Callable[..., Any], timeout: float = 120.0, **kwargs) -> list[Any]:
        """Runs fn(rank, world_size, **kwargs) on every rank; returns the per-rank results."""
        assert not self.broken, "pool is broken"
        for q in self._commands:
            q.put((fn, kwargs))
        outcomes: dict[int, tuple[str, Any]] = {}
        while len(outcomes) < self.world_size:
            try:
                rank, status, value = self._results.get(timeout=timeout)
            except queue.Empty:
                self.close(kill=True)
                missing = sorted(set(range(self.world_size)) - set(outcomes))
                errors = {r: v for r, (s, v) in outcomes.items() if s == "error"}
                raise AssertionError(
                    f"{fn.__name__}: ranks {missing} did not finish within {timeout}s; errors elsewhere: {errors}"
                ) from None
            outcomes[rank] = (status, value)
        errors = {r: v for r, (s, v) in sorted(outcomes.items()) if s == "error"}
        if errors:
            self.close(kill=True)
            raise AssertionError(
                f"{fn.__name__} failed on ranks {sorted(errors)}:\n"
                + "\n".join(f"--- rank {r}:\n{tb}" for r, tb in errors.items())
            )
        return [outcomes[r][1] for r in range(self.world_size)]

    def close(self, kill: bool = False) -> None:
        if not kill and not self.broken:
            for q in self._commands:
                q.put(None)
            for p in self._procs:
                p.join(timeout=30)
        self.broken = True
        for p in self._procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
        self._dir.cleanup()


def run_ranks(argv_of_rank: Callable[[int], list[str]], envs: list[dict], timeout: float) -> str:
    """Starts one process per entry of `envs` (rank r: `argv_of_rank(r)`, the
    environment plus envs[r]) and returns their output together, stdout and
    stderr, once all ended; every one is killed by `timeout` seconds."""
    import subprocess

    procs = [
        subprocess.Popen(
            argv_of_rank(rank), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, **extra}
        )
        for rank, extra in enumerate(envs)
    ]
    outputs = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            p.kill()
    return "\n".join(outputs)
