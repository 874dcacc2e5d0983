"""python -m fastcomm.doctor: what fastcomm can use on this machine, and why not.

    python -m fastcomm.doctor                          build, machine, single copy, network, environment
    python -m fastcomm.doctor --world-size 4 --hosts 2 ... and which algorithm each collective runs per size
    python -m fastcomm.doctor --json                   the same as one JSON object

Every line is ok, off, warn or info, with why and a fix where one applies.
The algorithm table starts a local group of --world-size ranks (hosts
simulated on this machine) and reads what the dispatcher launched.
"""

from __future__ import annotations

import argparse
import sys

from fastcomm.doctor import algorithm_report, algorithms, build, cross_memory, machine, network
from fastcomm.doctor.report import Item, to_json, to_text


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fastcomm.doctor", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--world-size",
        type=int,
        default=None,
        metavar="N",
        help="run the algorithm table for a group of N ranks (started here as processes)",
    )
    layout = p.add_mutually_exclusive_group()
    layout.add_argument("--hosts", type=int, default=None, metavar="H", help="... on H hosts of N/H ranks each")
    layout.add_argument(
        "--ranks-per-host", type=int, default=None, metavar="K", help="... in hosts of K consecutive ranks"
    )
    p.add_argument("--max-bytes", default="64M", help="largest size of the table (K/M/G suffixes; default 64M)")
    p.add_argument("--dtype", default="float32", help="element type of the table's calls (default float32)")
    p.add_argument(
        "--collectives",
        default=",".join(algorithms.COLLECTIVES),
        help="comma-separated subset of " + ", ".join(algorithms.COLLECTIVES),
    )
    p.add_argument(
        "--no-probe",
        action="store_true",
        help="do not start the two processes that test cross-memory attach; judge from the settings",
    )
    return p


def _sizes(max_bytes: str) -> list[int]:
    from fastcomm.bench.cli import UsageError, parse_size

    try:
        limit = parse_size(max_bytes)
    except UsageError as error:
        raise ValueError(f"--max-bytes: {error}") from None
    return [s for s in algorithms.SIZES if s <= limit]


def table_plan(args: argparse.Namespace) -> tuple[algorithms.Layout, list[int], list[str]] | None:
    """The table's layout, sizes and collectives (None without --world-size);
    ValueError for arguments that do not fit."""
    if args.world_size is None:
        return None
    lay = algorithms.layout(args.world_size, args.hosts, args.ranks_per_host)
    collectives = [c.strip() for c in args.collectives.split(",") if c.strip()]
    algorithms.validate(collectives, args.dtype)
    return lay, _sizes(args.max_bytes), collectives


def collect(args: argparse.Namespace, root: str = "/") -> tuple[list[Item], dict | None]:
    """Every finding, and the algorithm run (None without --world-size).
    `root`: where proc/ and sys/ are read (tests hand in a made-up tree)."""
    plan = table_plan(args)
    items = build.items() + machine.items(root) + cross_memory.items(root, run_probe=not args.no_probe)
    items += network.network_items(root) + [network.options_item()] + network.environment_items()
    if plan is None:
        items.append(
            Item(
                algorithm_report.SECTION,
                "table",
                "info",
                "not run",
                note="--world-size N (with --hosts H) shows which algorithm each collective runs per size",
            )
        )
        return items, None
    lay, sizes, collectives = plan
    try:
        run = algorithms.run(lay, sizes, collectives, args.dtype)
    except Exception as error:  # a rank failed: say so, keep the rest of the report
        items.append(
            Item(
                algorithm_report.SECTION,
                "table",
                "off",
                f"could not run a group of {lay.describe()}",
                why=f"{type(error).__name__}: {str(error).strip()[-500:]}",
                fix="the findings above say what is missing; docs/troubleshooting.md",
            )
        )
        return items, None
    return items + algorithm_report.notes(run), run


def _run_json(run: dict | None) -> dict | None:
    if run is None:
        return None
    r0 = run["ranks"][0]
    return {
        "layout": run["layout"],
        "dtype": run["dtype"],
        "sizes": run["sizes"],
        "rows": r0["rows"],
        "registered": r0["registered"],
        "config": r0["config"],
        "per_rank": [
            {key: r[key] for key in ("rank", "p2p", "huge_pages", "warnings", "usable_cpus")} for r in run["ranks"]
        ],
    }


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        items, run = collect(args)
    except ValueError as error:
        print(f"fastcomm.doctor: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(to_json(items, _run_json(run)))
    else:
        print(to_text(items))
        if run is not None:
            print()
            print(algorithm_report.table_text(run))
    return 0
