"""The benchmark harness, shared by fastcomm-bench and benchmarks/:

- spawn_ranks(): run a function on N local ranks over a FileStore, collect rank 0's result;
- alternating_rounds(): time several implementations side by side, in
  alternating rounds so machine noise hits all alike; median per
  implementation, slowest rank;
- sweep(): fastcomm-bench's nccl-tests loop: for each size, dtype and op, time
  the collective out of place and in place, check its results, and agree on
  the numbers across ranks.

Control traffic (combining times and #wrong counts) goes over a separate Gloo
group so a broken backend under test cannot corrupt its own verdict.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

from fastcomm.bench.collectives import COLLECTIVES, DTYPES, CollectiveSpec

# Untimed steps of a freshly built DDP before its steps are timed. DDP rebuilds
# its buckets after its first step, and on fastcomm a bucket's second
# single-copy all_reduce moves it into huge pages (docs/algorithms.md "Huge
# pages for reused tensors"): one-time costs, paid by the first three steps.
# From the fourth on, a step costs what training pays step after step.
# benchmarks/real_models.py keeps the untimed steps' times in its record.
DDP_WARMUP_STEPS = 3


def _spawned(rank: int, fn: Callable, nproc: int, args: tuple, store_path: str, result_path: str) -> None:
    import torch.distributed as dist

    result = fn(rank, nproc, dist.FileStore(store_path, nproc), *args)
    if rank == 0:
        with open(result_path, "wb") as f:
            pickle.dump(result, f)


def spawn_ranks(fn: Callable[..., Any], nproc: int, *args) -> Any:
    """Runs fn(rank, nproc, store, *args) on `nproc` new local processes (store:
    a FileStore they share, for init_process_group) and returns rank 0's
    return value. A rank's exception fails the whole call."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="fastcomm-bench-") as tmp:
        result_path = os.path.join(tmp, "result")
        mp.spawn(_spawned, args=(fn, nproc, args, os.path.join(tmp, "store"), result_path), nprocs=nproc)
        with open(result_path, "rb") as f:
            return pickle.load(f)


def add_round_arguments(parser, *, seconds: float, max_iters: int, warmup: int, rounds: int = 5) -> None:
    """The flags every side-by-side benchmark takes (see alternating_rounds)."""
    parser.add_argument("--nproc", type=int, default=2, help="local ranks")
    parser.add_argument("--warmup", type=int, default=warmup, help="untimed calls before timing (more up to ~20 ms)")
    parser.add_argument("--rounds", type=int, default=rounds, help="alternating rounds per case")
    parser.add_argument("--seconds", type=float, default=seconds, help="target time per case and implementation")
    parser.add_argument("--max-iters", type=int, default=max_iters, help="calls per round at most")


def measured(rank: int, what: str) -> None:
    """Progress on stderr (rank 0 only): benchmarks can run for minutes."""
    if rank == 0:
        print(f"  measured {what}", file=sys.stderr, flush=True)


def timed(fn: Callable[[], Any], iters: int) -> float:
    """Seconds per call of `fn`, over `iters` calls in a row."""
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - start) / iters


# A timer: timer(iters) -> seconds per call over `iters` calls.
Timer = Callable[[int], float]


def timer_of(fn: Callable[[], Any]) -> Timer:
    """A Timer (iters -> seconds per call) that times `fn` with timed()."""
    return lambda iters: timed(fn, iters)


def _slowest(values: list[float], control: dist.ProcessGroup) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=control)
    return t.tolist()


def alternating_rounds(
    timers: dict[str, Timer],
    control: dist.ProcessGroup,
    *,
    rounds: int = 5,
    seconds: float = 1.0,
    max_iters: int = 100000,
    warmup_calls: int = 3,
    warmup_seconds: float = 0.02,
    align: Callable[[], None] | None = None,
) -> dict[str, float]:
    """Times each implementation in `timers` side by side, and returns its median
    seconds per call on the slowest rank.

    Each implementation first warms up: `warmup_calls` calls, then more up to
    about `warmup_seconds` (the same count on every rank: the first size
    otherwise pays for cold caches and page faults). Then it gets its own
    iteration count, enough for about seconds / rounds per round at its own
    speed (agreed across ranks), and `rounds` rounds run, alternating between
    the implementations. Every sample starts after a barrier on `control` and
    `align()` (e.g. the group under test's own barrier, which releases ranks
    closer together than Gloo's)."""
    labels = list(timers)
    extra = _slowest([warmup_seconds / max(timers[k](warmup_calls), 1e-9) for k in labels], control)
    for label, n in zip(labels, extra):
        timers[label](int(min(n, 10000)) + 1)
    probes = _slowest([timers[k](3) for k in labels], control)
    iters = {k: int(min(max_iters, max(3, seconds / rounds / max(p, 1e-7)))) for k, p in zip(labels, probes)}
    samples: dict[str, list[float]] = {k: [] for k in labels}
    for _ in range(rounds):
        for label in labels:
            dist.barrier(group=control)
            if align is not None:
                align()
            samples[label].append(timers[label](iters[label]))
    medians = _slowest([statistics.median(samples[k]) for k in labels], control)
    return dict(zip(labels, medians))


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """What sweep() runs: one collective over sizes x dtypes x ops, with
    nccl-tests' iteration, check, averaging and blocking settings."""

    collective: str
    sizes: tuple[int, ...]
    dtypes: tuple[str, ...]
    ops: tuple[str, ...]  # ("none",) for non-reducing collectives
    root: int
    iters: int
    warmup: int
    check: int
    average: int  # 0 rank 0, 1 mean, 2 min, 3 max across ranks
    blocking: bool
    device: str


@dataclasses.dataclass
class Measurement:
    """One timed variant (out of place or in place) of one row, agreed across ranks."""

    time_us: float
    algbw: float  # GB/s, 1e9 B/s
    busbw: float
    wrong: int | None  # None: not checked
    error: str | None = None  # the backend refused or failed this call (e.g. Gloo: AVG on integers)


@dataclasses.dataclass
class Row:
    """One line of nccl-tests' table: a size, dtype, op and root, both variants
    (None where torch cannot express the variant)."""

    size: int
    count: int
    dtype: str
    op: str
    root: int
    out_of_place: Measurement | None
    in_place: Measurement | None


def _combine(value: float, how: int, control: dist.ProcessGroup) -> float:
    t = torch.tensor([value], dtype=torch.float64)
    if how == 0:
        dist.broadcast(t, src=0, group=control)
        return t.item()
    op = {1: dist.ReduceOp.SUM, 2: dist.ReduceOp.MIN, 3: dist.ReduceOp.MAX}[how]
    dist.all_reduce(t, op=op, group=control)
    return t.item() / dist.get_world_size(control) if how == 1 else t.item()


def _time(buffers, group, cfg: SweepConfig, control) -> float:
    for _ in range(cfg.warmup):
        for w in buffers.run(group, False):
            w.wait()
    dist.barrier(group=control)
    sync = torch.cuda.synchronize if cfg.device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    pending = []
    for _ in range(cfg.iters):
        works = buffers.run(group, not cfg.blocking)
        if cfg.blocking:
            for w in works:
                w.wait()
        else:
            pending.extend(works)
    for w in pending:
        w.wait()
    sync()
    return (time.perf_counter() - start) / max(cfg.iters, 1) * 1e6


def _check(buffers, group, cfg: SweepConfig, control) -> int:
    wrong = 0
    for _ in range(cfg.check):
        buffers.refill()
        dist.barrier(group=control)
        for w in buffers.run(group, False):
            w.wait()
        if cfg.device == "cuda":
            torch.cuda.synchronize()
        wrong += buffers.wrong()
    t = torch.tensor([wrong], dtype=torch.int64)
    dist.all_reduce(t, group=control)
    return int(t.item())


def measure(
    spec: CollectiveSpec,
    count: int,
    dtype: str,
    op: str,
    in_place: bool,
    group,
    control,
    cfg: SweepConfig,
    prepare=None,
) -> Measurement:
    """Times and checks one placement of `count` elements. `prepare` overrides spec.prepare
    (tests inject faults through it)."""
    n = dist.get_world_size(group)
    torch_dtype = DTYPES[dtype]
    device = torch.device(cfg.device, torch.cuda.current_device()) if cfg.device == "cuda" else torch.device("cpu")
    buffers = (prepare or spec.prepare)(count, torch_dtype, dist.get_rank(group), n, op, cfg.root, in_place, device)
    try:
        elapsed = _time(buffers, group, cfg, control)
    except RuntimeError as e:  # raised alike on every rank: validation happens before sending
        dist.barrier(group=control)
        return Measurement(0.0, 0.0, 0.0, None, error=str(e).strip().splitlines()[0])
    time_us = _combine(elapsed, cfg.average, control)
    nbytes = count * torch_dtype.itemsize
    algbw = nbytes / (time_us * 1e-6) / 1e9 if time_us > 0 else 0.0
    wrong = _check(buffers, group, cfg, control) if cfg.check > 0 else None
    return Measurement(time_us, algbw, algbw * spec.bus_factor(n), wrong)


def sweep(
    cfg: SweepConfig, groups: dict[str, dist.ProcessGroup], control: dist.ProcessGroup, on_row=None, prepare=None
) -> dict[str, list[Row]]:
    """Runs the sweep on every group in `groups` (label -> group), alternating
    between them per measurement so machine noise hits all alike. `on_row(label,
    row, done, total)` is called on every rank as rows complete."""
    spec = COLLECTIVES[cfg.collective]
    n = dist.get_world_size(control)
    rows: dict[str, list[Row]] = {label: [] for label in groups}
    cases = [(d, o, s) for d in cfg.dtypes for o in cfg.ops for s in cfg.sizes]
    for done, (dtype, op, size) in enumerate(cases, start=1):
        element = DTYPES[dtype].itemsize
        count = spec.count_for(size, element, n)
        for label, group in groups.items():
            oop = measure(spec, count, dtype, op, False, group, control, cfg, prepare) if spec.out_of_place else None
            ip = measure(spec, count, dtype, op, True, group, control, cfg, prepare) if spec.in_place else None
            row = Row(
                count * element, count, dtype, op if spec.reduces else "none", cfg.root if spec.rooted else -1, oop, ip
            )
            rows[label].append(row)
            if on_row:
                on_row(label, row, done, len(cases))
    return rows


def summary(rows: list[Row]) -> tuple[int, float]:
    """(#wrong over all rows, average busbw over every measured column), as nccl-tests' footer."""
    measurements = [m for r in rows for m in (r.out_of_place, r.in_place) if m is not None and m.error is None]
    wrong = sum(m.wrong or 0 for m in measurements)
    avg = sum(m.busbw for m in measurements) / len(measurements) if measurements else 0.0
    return wrong, avg


def errors(rows: list[Row]) -> list[str]:
    """The messages of every call the backend refused or failed in `rows`."""
    return [m.error for r in rows for m in (r.out_of_place, r.in_place) if m is not None and m.error]


def exit_status(rows: dict[str, list[Row]]) -> int:
    """1 when any checked result was wrong, or any call failed, on any backend; else 0."""
    return 1 if any(summary(rs)[0] or errors(rs) for rs in rows.values()) else 0


class Progress:
    """Progress lines on stderr, only once a sweep has run for more than `after` seconds."""

    def __init__(self, after: float = 3.0, stream=sys.stderr) -> None:
        self.start = time.monotonic()
        self.after = after
        self.stream = stream

    def __call__(self, label: str, row: Row, done: int, total: int) -> None:
        elapsed = time.monotonic() - self.start
        if elapsed > self.after:
            print(
                f"[fastcomm-bench] {label}: {done}/{total} ({row.size} B {row.dtype} {row.op}) {elapsed:.1f} s",
                file=self.stream,
                flush=True,
            )
