"""The loops of benchmarks/peers/patterns.py, the same for every library.

Each loop calls a library the way training code does: from Python, ranks
arriving apart, no barrier before an op. A `Library` gives the calls:
`all_reduce(buf)` (float32 SUM in place), `send(buf, dst)`, `recv(buf, src)`,
`barrier()`, `max_over_ranks(x)` and `new_buffer(count, value)`, on numpy
arrays or torch tensors (whatever the library takes).

- skew: every rank computes (busy-waits) a random 0-W us, then all_reduces.
  An op can end only once the last rank arrives, so one iteration lasts the
  slowest rank's compute plus what the op costs beyond it; the schedules are
  drawn from (seed, rank), so every rank knows them all and the sum of the
  iterations' slowest computes is subtracted: what is left, per op, is the
  library's cost as training meets it (waiting idle, then waking).
- pingpong: ranks 0 and 1 exchange one message back and forth (pipeline
  stages passing activations); before each send the sender computes a random
  0-W us. The computes are serial, so their sum is subtracted: what is left,
  per transfer, is the library's.

Every loop checks its result once before timing (exact values).

A busy neighbour (patterns.py --busy): a process that counts units of work
into a shared counter (neighbour_main); rank 0 reads the counter around the
cells, so the record says how much work the neighbour got done beside each
library while the loops ran (speed taken from a neighbour does not count).
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
import time

import numpy as np

NEIGHBOUR_ENV = "FASTCOMM_PATTERNS_NEIGHBOUR"  # the neighbour's counter file, when one runs


def neighbour_main(path: str) -> None:
    """The busy neighbour: counts units of pure-Python work (about 20 us each) into `path` forever."""
    with open(path, "r+b") as f:
        counter = mmap.mmap(f.fileno(), 8)
    done = 0
    while True:
        for _ in range(500):
            pass
        done += 1
        struct.pack_into("q", counter, 0, done)


def neighbour_count(path: str | None = None) -> tuple[int, float] | None:
    """(units the neighbour did so far, now), or None without a neighbour (default: the one $NEIGHBOUR_ENV names)."""
    path = path or os.environ.get(NEIGHBOUR_ENV)
    if not path:
        return None
    with open(path, "rb") as f:
        return struct.unpack("q", f.read(8))[0], time.perf_counter()


def compute(microseconds: float) -> None:
    """Busy for `microseconds` (a stand-in for a step's compute: the CPU is used, not slept)."""
    end = time.perf_counter() + microseconds * 1e-6
    while time.perf_counter() < end:
        pass


def schedule(seed: int, rank: int, iters: int, width_us: float) -> np.ndarray:
    """Rank `rank`'s computes, in microseconds: the same in every library and on every rank."""
    if width_us <= 0:
        return np.zeros(iters)
    return np.random.default_rng([seed, rank]).uniform(0.0, width_us, iters)


def iterations(width_us: float, size: int, budget_s: float) -> int:
    """How many iterations fill about `budget_s` (an estimate, the same for every library)."""
    per_iter = width_us * 0.75e-6 + size / 2e9 + 20e-6
    return int(min(5000, max(20, budget_s / per_iter)))


def skew(lib, rank: int, nproc: int, size: int, width_us: float, budget_s: float, seed: int) -> float:
    """Seconds per all_reduce beyond the slowest rank's compute (slowest rank's view)."""
    count = max(1, size // 4)
    buf = lib.new_buffer(count, rank + 1)
    lib.all_reduce(buf)
    assert bool((buf == nproc * (nproc + 1) / 2).all()), "wrong all_reduce result"
    buf = lib.new_buffer(count, 0)  # zeros stay zeros: every op of the loop is exact
    iters = iterations(width_us, size, budget_s)
    computes = [schedule(seed, r, iters, width_us) for r in range(nproc)]
    slowest_compute = float(np.max(np.stack(computes), axis=0).sum()) * 1e-6
    mine = computes[rank]
    for _ in range(3):
        lib.all_reduce(buf)
    lib.barrier()
    start = time.perf_counter()
    for i in range(iters):
        compute(mine[i])
        lib.all_reduce(buf)
    elapsed = time.perf_counter() - start
    assert bool((buf == 0).all()), "wrong all_reduce result"
    return lib.max_over_ranks((elapsed - slowest_compute) / iters)


def pingpong(lib, rank: int, size: int, width_us: float, budget_s: float, seed: int) -> float:
    """Seconds per transfer between ranks 0 and 1 beyond the senders' computes (others return 0)."""
    count = max(1, size // 4)
    iters = iterations(width_us, 2 * size, budget_s)
    buf = lib.new_buffer(count, rank + 1)
    if rank == 0:
        lib.send(buf, 1)
        lib.recv(buf, 1)
        assert bool((buf == 2 * 2).all()), "wrong message"
    elif rank == 1:
        lib.recv(buf, 0)
        assert bool((buf == 1).all()), "wrong message"
        buf *= 4
        lib.send(buf, 0)
    computes = [schedule(seed, r, iters, width_us) for r in range(2)]
    lib.barrier()
    start = time.perf_counter()
    if rank == 0:
        mine = computes[0]
        for i in range(iters):
            compute(mine[i])
            lib.send(buf, 1)
            lib.recv(buf, 1)
    elif rank == 1:
        mine = computes[1]
        for i in range(iters):
            lib.recv(buf, 0)
            compute(mine[i])
            lib.send(buf, 0)
    elapsed = time.perf_counter() - start
    per = (elapsed - float(computes[0].sum() + computes[1].sum()) * 1e-6) / (2 * iters) if rank < 2 else 0.0
    return lib.max_over_ranks(per)


def run_cells(lib, rank: int, nproc: int, cells: list[dict], budget_s: float, seed: int) -> dict:
    """Each cell {"pattern", "size", "width_us"}: its seconds per op (pingpong cells need 2 ranks);
    and the busy neighbour's units of work per second meanwhile (None without one)."""
    before = neighbour_count() if rank == 0 else None
    seconds = []
    for cell in cells:
        if cell["pattern"] == "skew":
            seconds.append(skew(lib, rank, nproc, cell["size"], cell["width_us"], budget_s, seed))
        else:
            seconds.append(pingpong(lib, rank, cell["size"], cell["width_us"], budget_s, seed))
    after = neighbour_count() if rank == 0 else None
    rate = (after[0] - before[0]) / (after[1] - before[1]) if before and after else None
    return {"seconds": seconds, "neighbour_rate": rate}


if __name__ == "__main__":
    neighbour_main(sys.argv[1])
