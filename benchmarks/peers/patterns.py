"""Collectives and point-to-point as training calls them: fastcomm beside Gloo, MPICH and Open MPI.

    bash benchmarks/peers/setup.sh             # once: MPICH and Open MPI with mpi4py
    python benchmarks/peers/patterns.py        # 2 and 4 ranks, quiet and beside a busy neighbour, 3 rounds

The loops are benchmarks/peers/pattern_loops.py's, called from Python with no
barrier before an op: `skew` (each rank computes a random 0-W us, then
all_reduces: the ranks arrive apart) and `pingpong` (two ranks pass one
message back and forth, the sender computing a random 0-W us first). Each
figure is a library's time per op beyond the compute (its own cost as
training meets it), the median of --rounds interleaved rounds (round k runs
every library once, in an order that rotates). fastcomm and Gloo are called
through torch.distributed (dist.all_reduce, dist.send, dist.recv), MPICH and
Open MPI through mpi4py (Allreduce, Send, Recv), each with its defaults;
`fastcomm-backend` runs fastcomm's ops on the backend object
(`group._get_backend(cpu).allreduce([t]).wait()`), a call as thin as
mpi4py's: its gap to `fastcomm` is what torch.distributed's own Python and
dispatcher layers cost per call, which every torch backend pays.

`--busy 1` runs a neighbour process throughout (pattern_loops.neighbour_main,
pure-Python work) and records how much work it got done beside each library,
as a share of what it does on a machine left to it (measured before each
round): speed taken from a neighbour's CPU shows there. Ratios are library /
fastcomm (> 1: fastcomm faster). `fastcomm-backend-nobudget` (on request in
--libraries) is fastcomm-backend with FASTCOMM_SHM_SPIN_BUDGET=0: waits sleep
after ~100 us instead of following the recent waits. The record goes to
benchmarks/results/peer_patterns.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import pattern_loops  # noqa: E402
import results_record  # noqa: E402
from run import _run, peer_versions  # noqa: E402

LIBRARIES = ("fastcomm", "fastcomm-backend", "gloo", "mpich", "openmpi")
# Variants run on request (--libraries): a fastcomm library with a setting changed.
VARIANTS = {"-nobudget": "FASTCOMM_SHM_SPIN_BUDGET=0"}
SKEW = [(size, width) for width in (50, 200, 1000) for size in (8, 65536, 1 << 20)]
PINGPONG = [(size, width) for width in (0, 200) for size in (1024, 65536, 4 << 20)]


def cells_for(nproc: int) -> list[dict]:
    """Skewed all_reduces at every rank count; the ping-pong between two ranks only."""
    cells = [{"pattern": "skew", "size": s, "width_us": w} for s, w in SKEW]
    if nproc == 2:
        cells += [{"pattern": "pingpong", "size": s, "width_us": w} for s, w in PINGPONG]
    return cells


def command(lib: str, nproc: int, cells: list[dict], args) -> list[str] | str:
    """The command of one run, or why the library is skipped."""
    common = ["--cells", json.dumps(cells), "--budget", str(args.budget), "--seed", str(args.seed)]
    for suffix, setting in VARIANTS.items():
        if lib.startswith("fastcomm") and lib.endswith(suffix):
            base = command(lib[: -len(suffix)], nproc, cells, args)
            return ["env", setting, *base] if isinstance(base, list) else base
    if lib in ("fastcomm", "fastcomm-backend", "gloo"):
        worker = os.path.join(HERE, "patterns_torch.py")
        api = "backend" if lib.endswith("-backend") else "dist"
        backend = lib.split("-")[0]
        return [sys.executable, worker, "--backend", backend, "--api", api, "--nproc", str(nproc), *common]
    venv = os.path.join(ROOT, f".venv-peers-{lib}", "bin")
    if not os.path.exists(os.path.join(venv, "mpiexec")):
        return f"no {venv}/mpiexec: run bash benchmarks/peers/setup.sh"
    extra = ["--allow-run-as-root", "--oversubscribe"] if lib == "openmpi" else []
    worker = os.path.join(HERE, "patterns_mpi.py")
    return [os.path.join(venv, "mpiexec"), *extra, "-n", str(nproc), os.path.join(venv, "python"), worker, *common]


def neighbour_alone(path: str, seconds: float = 1.0) -> float:
    """The neighbour's units of work per second with the machine to itself (and this idle script)."""
    before = pattern_loops.neighbour_count(path)
    time.sleep(seconds)
    after = pattern_loops.neighbour_count(path)
    return (after[0] - before[0]) / (after[1] - before[1])


def run_condition(nproc: int, busy: bool, libraries: list[str], commands: dict, args) -> tuple[dict, dict]:
    """Per library: per-cell lists of seconds (one per round) and the neighbour's kept share per round."""
    seconds = {lib: [] for lib in libraries}
    kept = {lib: [] for lib in libraries}
    with tempfile.TemporaryDirectory(prefix="fastcomm-patterns-") as tmp:
        neighbour = None
        alone = []
        if busy:
            counter = os.path.join(tmp, "neighbour")
            with open(counter, "wb") as f:
                f.write(bytes(8))
            neighbour = subprocess.Popen([sys.executable, os.path.join(HERE, "pattern_loops.py"), counter])
            time.sleep(0.3)
            os.environ[pattern_loops.NEIGHBOUR_ENV] = counter  # the runs inherit it
        try:
            for k in range(args.rounds):
                if neighbour:  # taken each round: the machine's pace drifts between rounds
                    alone.append(neighbour_alone(counter))
                for lib in libraries[k % len(libraries) :] + libraries[: k % len(libraries)]:
                    out, _ = _run(commands[lib], timeout=600)  # run.py's: also removes the peers' /dev/shm files
                    seconds[lib].append(out["seconds"])
                    if neighbour:
                        kept[lib].append(out["neighbour_rate"] / alone[-1])
                    print(f"  {nproc} ranks, {'busy' if busy else 'quiet'}, round {k + 1}: {lib}", file=sys.stderr)
        finally:
            os.environ.pop(pattern_loops.NEIGHBOUR_ENV, None)
            if neighbour:
                neighbour.kill()
                neighbour.wait()
    return seconds, kept


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc", default="2,4", help="rank counts, comma-separated")
    p.add_argument("--busy", default="0,1", help="0: quiet, 1: beside a busy neighbour; comma-separated")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--budget", type=float, default=0.3, help="seconds per cell and run (about)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--libraries", default=",".join(LIBRARIES))
    results_record.add_arguments(p, "peer_patterns")
    args = p.parse_args(argv)
    rows = []
    used = []
    for nproc in [int(x) for x in args.nproc.split(",")]:
        cells = cells_for(nproc)
        commands = {lib: command(lib, nproc, cells, args) for lib in args.libraries.split(",")}
        for lib, c in commands.items():
            if isinstance(c, str):
                print(f"# {lib} skipped: {c}", file=sys.stderr)
        libraries = [lib for lib, c in commands.items() if isinstance(c, list)]
        used = sorted(set(used) | set(libraries))
        for busy in [x == "1" for x in args.busy.split(",")]:
            seconds, kept = run_condition(nproc, busy, libraries, commands, args)
            condition = "busy" if busy else "quiet"
            print(
                f"# {nproc} ranks, {condition}: us per op beyond the compute (median of {args.rounds} rounds);"
                " ratio library / fastcomm"
            )
            print(f"{'pattern':9} {'size':>8} {'W us':>5} " + " ".join(f"{lib:>16}" for lib in libraries))
            for i, cell in enumerate(cells):
                medians = {lib: statistics.median(r[i] for r in seconds[lib]) * 1e6 for lib in libraries}
                base = medians.get("fastcomm")
                line = f"{cell['pattern']:9} {cell['size']:>8} {cell['width_us']:>5} "
                line += " ".join(
                    f"{medians[lib]:8.1f} ({medians[lib] / base:4.2f})" if base else f"{medians[lib]:16.1f}"
                    for lib in libraries
                )
                print(line)
                for lib in libraries:
                    rows.append(
                        {
                            "nproc": nproc,
                            "condition": condition,
                            **cell,
                            "library": lib,
                            "us_per_op": medians[lib],
                            "rounds_us": [r[i] * 1e6 for r in seconds[lib]],
                        }
                    )
            if busy:
                print(
                    "# the neighbour's work beside each library, share of what it does alone: "
                    + ", ".join(f"{lib} {statistics.median(kept[lib]):.0%}" for lib in libraries)
                )
                for lib in libraries:
                    rows.append(
                        {
                            "nproc": nproc,
                            "condition": condition,
                            "pattern": "neighbour",
                            "library": lib,
                            "neighbour_kept": statistics.median(kept[lib]),
                        }
                    )
    results_record.save(args, "peer_patterns", rows, script=__file__, argv=argv, extra_versions=peer_versions(used))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
