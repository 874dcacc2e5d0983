"""fastcomm-bench: nccl-tests-style benchmark for any torch.distributed backend.

    fastcomm-bench COLLECTIVE [flags]          (or: python -m fastcomm.bench ...)

Flags follow nccl-tests (same names, defaults and K/M/G size suffixes), plus
--backend, --device, --nproc, --json, --compare and --plot. Every argument is
checked before any process starts: a bad one exits 2 with one line on stderr.
A wrong result exits 1. Under torchrun the launcher's ranks are used.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import socket
import sys

from fastcomm.bench.collectives import COLLECTIVES, DTYPES, OPS

BACKENDS = ("fastcomm", "gloo", "nccl", "mpi")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


class UsageError(Exception):
    """A bad argument: main() prints it as one line and exits 2."""


def parse_size(text: str) -> int:
    """nccl-tests sizes: a non-negative integer with an optional K/M/G (binary) suffix."""
    raw = text.strip()
    digits, unit = (raw[:-1], raw[-1].upper()) if raw and raw[-1].upper() in _UNITS else (raw, "")
    try:
        value = int(digits)
    except ValueError:
        raise UsageError(f"cannot parse size {text!r} (expected e.g. 8, 64K, 32M, 1G)") from None
    if value < 0:
        raise UsageError(f"size {text!r} is negative")
    return value * _UNITS.get(unit, 1)


def sizes(minbytes: int, maxbytes: int, stepfactor: int, stepbytes: int) -> list[int]:
    """nccl-tests' sweep: multiply by stepfactor when it is > 1, else add stepbytes."""
    out, size = [], minbytes
    while size <= maxbytes:
        out.append(size)
        size = size * stepfactor if stepfactor > 1 else size + stepbytes
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2 (argparse prints usage too)
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser: nccl-tests' flags and defaults, then fastcomm's own."""
    p = _Parser(prog="fastcomm-bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("collective", help="one of " + ", ".join(COLLECTIVES))
    p.add_argument("-b", "--minbytes", default="32M", help="smallest size (default 32M)")
    p.add_argument("-e", "--maxbytes", default="32M", help="largest size (default 32M)")
    p.add_argument("-f", "--stepfactor", default="1", help="multiply sizes by this (default 1: use -i)")
    p.add_argument("-i", "--stepbytes", default="1M", help="add this to sizes when -f is 1 (default 1M)")
    p.add_argument("-n", "--iters", default="20", help="timed iterations (default 20)")
    p.add_argument("-w", "--warmup_iters", default="1", help="untimed warm-up iterations (default 1)")
    p.add_argument("-c", "--check", default="1", help="iterations whose results are checked (default 1; 0: none)")
    p.add_argument(
        "-d", "--datatype", default="float", help="float, half, bfloat16, double, int8, uint8, int32, int64 or all"
    )
    p.add_argument(
        "-o", "--op", default=None, help="sum, prod, min, max, avg or all (default sum; reducing collectives only)"
    )
    p.add_argument("-r", "--root", default="0", help="root rank of rooted collectives (default 0)")
    p.add_argument("-a", "--average", default="1", help="time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (default 1)")
    p.add_argument("-z", "--blocking", default="0", help="1: wait after every call (default 0)")
    p.add_argument("--backend", default="fastcomm", help="fastcomm (default), gloo, nccl or mpi")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda for nccl, else cpu)")
    p.add_argument(
        "--nproc",
        default=None,
        help="local ranks to spawn (default 2 on CPU, one per GPU on CUDA; ignored under torchrun)",
    )
    p.add_argument("--json", default=None, metavar="PATH", help="write every row and the summary as JSON")
    p.add_argument(
        "--compare", default=None, metavar="BACKEND", help="also run BACKEND in the same ranks; print ratios"
    )
    p.add_argument(
        "--plot", default=None, metavar="PATH.png", help="busbw against size, one line per backend (needs matplotlib)"
    )
    return p


@dataclasses.dataclass(frozen=True)
class Options:
    """A run's settings, parsed and checked: sizes expanded to the sweep, sizes
    in bytes, dtype and op names resolved ('all' expanded)."""

    collective: str
    sizes: tuple[int, ...]
    minbytes: int
    maxbytes: int
    stepfactor: int
    stepbytes: int
    dtypes: tuple[str, ...]
    ops: tuple[str, ...]
    root: int
    iters: int
    warmup: int
    check: int
    average: int
    blocking: bool
    backend: str
    device: str
    nproc: int
    under_torchrun: bool
    json: str | None
    compare: str | None
    plot: str | None


def _int(name: str, text: str, low: int, high: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{name} must be an integer, got {text!r}") from None
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in {low}..{high}"
        raise UsageError(f"{name} must be {bound}, got {value}")
    return value


def _choices(name: str, text: str, allowed: list[str]) -> tuple[str, ...]:
    if text == "all":
        return tuple(allowed)
    if text not in allowed:
        raise UsageError(f"unknown {name} {text!r} (choose from {', '.join(allowed)} or all)")
    return (text,)


def _check_backend(backend: str, device: str, what: str) -> None:
    import torch.distributed as dist

    if backend not in BACKENDS:
        raise UsageError(f"unknown {what} {backend!r} (choose from {', '.join(BACKENDS)})")
    if backend == "nccl" and (device != "cuda" or not dist.is_nccl_available()):
        raise UsageError(f"{what} nccl needs --device cuda and a torch built with NCCL")
    if backend == "mpi" and not dist.is_mpi_available():
        raise UsageError(f"{what} mpi: this torch was built without MPI")


def parse_args(argv: list[str] | None = None, environ=os.environ) -> Options:
    """Parses and validates everything; raises UsageError (exit 2) on the first problem."""
    a = build_parser().parse_args(argv)
    if a.collective not in COLLECTIVES:
        raise UsageError(f"unknown collective {a.collective!r} (choose from {', '.join(COLLECTIVES)})")
    spec = COLLECTIVES[a.collective]
    minbytes, maxbytes, stepbytes = parse_size(a.minbytes), parse_size(a.maxbytes), parse_size(a.stepbytes)
    stepfactor = _int("-f/--stepfactor", a.stepfactor, 1)
    if minbytes < 1:
        raise UsageError("-b/--minbytes must be at least 1 byte")
    if minbytes > maxbytes:
        raise UsageError(f"-b/--minbytes ({minbytes}) is larger than -e/--maxbytes ({maxbytes})")
    if stepfactor == 1 and stepbytes < 1:
        raise UsageError("-i/--stepbytes must be at least 1 byte when -f/--stepfactor is 1")
    dtypes = _choices("datatype", a.datatype, list(DTYPES))
    if a.op is not None and not spec.reduces:
        raise UsageError(f"-o/--op {a.op!r} is invalid for {a.collective}, which does not reduce")
    ops = _choices("op", a.op or "sum", list(OPS)) if spec.reduces else ("none",)
    device = a.device or ("cuda" if a.backend == "nccl" else "cpu")
    if device not in ("cpu", "cuda"):
        raise UsageError(f"unknown device {device!r} (choose from cpu, cuda)")
    if device == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UsageError("--device cuda: no CUDA device is visible")
    under_torchrun = "RANK" in environ and "WORLD_SIZE" in environ
    if a.nproc is not None:
        _int("--nproc", a.nproc, 1)  # validated even where the launcher decides
    if under_torchrun:
        nproc = _int("WORLD_SIZE", environ["WORLD_SIZE"], 1)
        if a.nproc is not None and int(a.nproc) != nproc and environ.get("RANK") == "0":
            print(f"fastcomm-bench: --nproc {a.nproc} ignored under torchrun ({nproc} ranks)", file=sys.stderr)
    else:
        default = "2"
        if device == "cuda":
            import torch

            default = str(torch.cuda.device_count())
        nproc = _int("--nproc", a.nproc or default, 1)
    root = _int("-r/--root", a.root, 0, nproc - 1)
    _check_backend(a.backend, device, "backend")
    if a.compare is not None:
        _check_backend(a.compare, device, "--compare backend")
        if a.compare == a.backend:
            raise UsageError(f"--compare {a.compare} is the backend under test itself")
    if a.plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib (pip install matplotlib)") from None
    for path in (a.json, a.plot):
        if path is not None and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise UsageError(f"cannot write {path!r}: its folder does not exist")
    return Options(
        collective=a.collective,
        sizes=tuple(sizes(minbytes, maxbytes, stepfactor, stepbytes)),
        minbytes=minbytes,
        maxbytes=maxbytes,
        stepfactor=stepfactor,
        stepbytes=stepbytes,
        dtypes=dtypes,
        ops=ops,
        root=root,
        iters=_int("-n/--iters", a.iters, 1),
        warmup=_int("-w/--warmup_iters", a.warmup_iters, 0),
        check=_int("-c/--check", a.check, 0),
        average=_int("-a/--average", a.average, 0, 3),
        blocking=bool(_int("-z/--blocking", a.blocking, 0, 1)),
        backend=a.backend,
        device=device,
        nproc=nproc,
        under_torchrun=under_torchrun,
        json=a.json,
        compare=a.compare,
        plot=a.plot,
    )


def _title(opts: Options, rank_lines: list[str]) -> list[str]:
    step = f"{opts.stepfactor}(factor)" if opts.stepfactor > 1 else f"{opts.stepbytes}(bytes)"
    return [
        f"fastcomm-bench {opts.collective}: backend {opts.backend}, device {opts.device}, {opts.nproc} ranks",
        f"minBytes {opts.minbytes} maxBytes {opts.maxbytes} step: {step} warmup iters: {opts.warmup}"
        f" iters: {opts.iters} validation: {opts.check} blocking: {int(opts.blocking)} average: {opts.average}",
        "",
        "Using devices",
        *rank_lines,
    ]


def run_rank(rank: int, opts: Options, store=None) -> int:
    """One rank's whole run; returns the exit status (rank 0 prints and writes files)."""
    import torch
    import torch.distributed as dist

    if "fastcomm" in (opts.backend, opts.compare):
        import fastcomm  # noqa: F401  (registers the backend)
    from fastcomm.bench import output
    from fastcomm.bench.harness import Progress, SweepConfig, exit_status, sweep

    torch.set_num_threads(1)
    if opts.device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    timeout = datetime.timedelta(minutes=5)
    if store is None:
        dist.init_process_group(opts.backend, timeout=timeout)  # env:// from torchrun
    else:
        dist.init_process_group(opts.backend, store=store, rank=rank, world_size=opts.nproc, timeout=timeout)
    rank = dist.get_rank()
    control = dist.new_group(backend="gloo")
    groups = {opts.backend: dist.group.WORLD}
    if opts.compare:
        groups[opts.compare] = dist.new_group(backend=opts.compare)
    who = [None] * opts.nproc
    dist.all_gather_object(who, (os.getpid(), socket.gethostname(), opts.device), group=control)
    cfg = SweepConfig(
        opts.collective,
        opts.sizes,
        opts.dtypes,
        opts.ops,
        opts.root,
        opts.iters,
        opts.warmup,
        opts.check,
        opts.average,
        opts.blocking,
        opts.device,
    )
    rows = sweep(cfg, groups, control, on_row=Progress() if rank == 0 else None)
    status = exit_status(rows)
    if rank == 0:
        rank_lines = [f" Rank {r:2d} Pid {pid:6d} on {host:>10} device {dev}" for r, (pid, host, dev) in enumerate(who)]
        for label, rs in rows.items():
            shown = dataclasses.replace(opts, backend=label)
            print(output.table(_title(shown, rank_lines), rs), flush=True)
        if opts.compare:
            print(output.compare_table(list(groups), rows), flush=True)
        if opts.json:
            meta = {
                "collective": opts.collective,
                "backend": opts.backend,
                "compare": opts.compare,
                "device": opts.device,
                "nproc": opts.nproc,
                "iters": opts.iters,
                "warmup": opts.warmup,
                "check": opts.check,
                "average": opts.average,
                "blocking": opts.blocking,
            }
            with open(opts.json, "w") as f:
                f.write(output.to_json(meta, rows))
        if opts.plot:
            output.plot(opts.plot, f"{opts.collective} ({opts.nproc} ranks, {opts.device})", rows)
    dist.barrier(group=control)
    dist.destroy_process_group()
    return status


def _spawned_rank(rank: int, nproc: int, store, opts: Options) -> int:
    return run_rank(rank, opts, store)


def main(argv: list[str] | None = None) -> int:
    """The ``fastcomm-bench`` command: parses `argv` (default: the command
    line), then runs the sweep on ``--nproc`` spawned local ranks, or on this
    process's rank under torchrun. Returns the exit status: 0, 1 when a
    result was wrong or a call refused, 2 on a bad argument."""
    try:
        opts = parse_args(argv)
    except UsageError as e:
        print(f"fastcomm-bench: error: {e}", file=sys.stderr)
        return 2
    if opts.under_torchrun:
        return run_rank(int(os.environ["RANK"]), opts)
    from fastcomm.bench.harness import spawn_ranks

    return spawn_ranks(_spawned_rank, opts.nproc, opts)


if __name__ == "__main__":
    sys.exit(main())
