"""Sections of the collective benchmarks: all_reduce and friends against Gloo,
arena against ordinary tensors, across namespace hosts, and against the peer
libraries (MPICH, Open MPI, DeepSpeed, oneCCL)."""

from __future__ import annotations

from fastcomm.bench.svg import grouped_bars

from rendering import text
from rendering.section import Section


def _allreduce_vs_gloo(record: dict) -> tuple[str, str]:
    s, rows = record["settings"], record["results"]
    op = f"{s.get('op')} ({s.get('reduce_op')})" if "reduce" in str(s.get("op")) else s.get("op")
    hosts = f", hosts of {s['ranks_per_host']} ranks (simulated)" if s.get("ranks_per_host") else ""
    head = (
        f"{op}, {text.dtype(s.get('dtype'))}, {s.get('nproc')} ranks{hosts}, `--api {s.get('api')}`; median of "
        f"{s.get('rounds')} alternating rounds, slowest rank; busbw in GB/s (1e9 B/s)."
    )
    body = []
    for r in rows:
        bw = lambda t: r["bytes"] * r["bus_factor"] / t / 1e9  # noqa: E731
        body.append(
            [
                text.size(r["bytes"]),
                text.number(r["fastcomm_s"], 1, 1e6),
                text.number(r["gloo_s"], 1, 1e6),
                f"{bw(r['fastcomm_s']):.3f}",
                f"{bw(r['gloo_s']):.3f}",
                text.ratio(r["gloo_s"], r["fastcomm_s"]),
            ]
        )
    wrong = [text.size(r["bytes"]) for r in rows if r["wrong_fastcomm"] or r["wrong_gloo"]]
    note = f"\n\nWrong results at: {', '.join(wrong)}." if wrong else ""
    table = text.table(["size", "fastcomm (us)", "Gloo (us)", "fastcomm busbw", "Gloo busbw", "Gloo / fastcomm"], body)
    groups = [(text.size(r["bytes"]), [("Gloo", r["gloo_s"] * 1e6), ("fastcomm", r["fastcomm_s"] * 1e6)]) for r in rows]
    svg = grouped_bars(
        f"{s.get('op')} {text.dtype(s.get('dtype'))}, {s.get('nproc')} ranks: us per call (lower is better)",
        groups,
        unit="us",
        colours=text.colours(["Gloo", "fastcomm"]),
    )
    return f"{head}\n\n{table}{note}", svg


def _arena_vs_ordinary(record: dict) -> tuple[str, str]:
    s, rows = record["settings"], record["results"]
    head = (
        f"{s.get('collective')}, float32, {s.get('nproc')} ranks on one host; median of {s.get('rounds')} "
        "alternating rounds, slowest rank; busbw in GB/s."
    )
    body = [
        [
            text.size(r["bytes"]),
            text.number(r["arena_s"], 1, 1e6),
            text.number(r["ordinary_s"], 1, 1e6),
            text.number(r["gloo_s"], 1, 1e6),
            f"{r['bytes'] * r['bus_factor'] / r['arena_s'] / 1e9:.2f}",
            text.ratio(r["ordinary_s"], r["arena_s"]),
            text.ratio(r["gloo_s"], r["arena_s"]),
        ]
        for r in rows
    ]
    table = text.table(
        ["size", "arena (us)", "ordinary (us)", "Gloo (us)", "arena busbw", "ordinary / arena", "Gloo / arena"], body
    )
    series = ["Gloo", "ordinary", "arena"]
    groups = [
        (
            text.size(r["bytes"]),
            [("Gloo", r["gloo_s"] * 1e6), ("ordinary", r["ordinary_s"] * 1e6), ("arena", r["arena_s"] * 1e6)],
        )
        for r in rows
    ]
    svg = grouped_bars(
        f"{s.get('collective')} float32, {s.get('nproc')} ranks: us per call (lower is better)",
        groups,
        unit="us",
        colours=text.colours(series),
    )
    return f"{head}\n\n{table}", svg


def _multihost(record: dict) -> tuple[str, None]:
    body = []
    for r in record["results"]:
        what = r["what"] if r["bytes"] is not None else f"{r['what']} ({text.params(r['params'])} parameters)"
        body.append(
            [
                r["link"],
                what,
                text.size(r["bytes"]),
                text.number(r["fastcomm_s"], 2, 1e3),
                text.number(r["gloo_s"], 2, 1e3),
                text.ratio(r["gloo_s"], r["fastcomm_s"]),
            ]
        )
    table = text.table(["link", "what", "size", "fastcomm (ms)", "Gloo (ms)", "Gloo / fastcomm"], body, "llrrrr")
    return "2 namespace hosts x 2 ranks, links shaped with tc; float32.\n\n" + table, None


def _peers(record: dict) -> tuple[str, str]:
    s, rows = record["settings"], record["results"]
    libraries = list(dict.fromkeys(r["library"] for r in rows))
    sizes = list(dict.fromkeys(r["bytes"] for r in rows))
    at = {(r["library"], r["bytes"]): r for r in rows}
    head = (
        f"all_reduce float32 SUM in place, {s.get('nproc')} ranks, background load {s.get('background_load')}; "
        f"{s.get('rounds')} interleaved rounds; fastcomm and Gloo through `--api {s.get('api')}`. Each cell: "
        "the library's statistic in us, then its ratio to fastcomm's (> 1: fastcomm faster)."
    )

    def stat_table(key: str, spread) -> str:
        body = []
        for n in sizes:
            base = at.get(("fastcomm", n), {}).get(key)
            cells = [text.size(n)]
            for lib in libraries:
                r = at[(lib, n)]
                cell = f"{r[key] * 1e6:.1f}" + (f" ({spread(r)})" if spread else "")
                if lib != "fastcomm" and base:
                    cell += f", {r[key] / base:.2f}x"
                cells.append(cell)
            body.append(cells)
        return text.table(["size", *libraries], body)

    p90_p10 = lambda r: f"{r['p90_s'] / r['p10_s']:.1f}"  # noqa: E731
    rounds = lambda r: f"{max(r['round_medians_s']) / min(r['round_medians_s']):.2f}"  # noqa: E731
    others = "; ".join(
        f"{lib} {min(at[(lib, sizes[0])]['others_cpu_share']):.0%}-{max(at[(lib, sizes[0])]['others_cpu_share']):.0%}"
        for lib in libraries
    )
    parts = [
        head,
        "Median (spread: 90th / 10th percentile):",
        stat_table("median_s", p90_p10),
        "Mean (a loop's time per op: rare long stalls count):",
        stat_table("mean_s", None),
        "90th percentile, the slow tail (spread: the slowest round's median / the fastest round's):",
        stat_table("p90_s", rounds),
        f"CPU other processes used during each library's rounds (share of the machine): {others}.",
    ]
    groups = [(text.size(n), [(lib, at[(lib, n)]["median_s"] * 1e6) for lib in libraries]) for n in sizes]
    svg = grouped_bars(
        f"all_reduce float32, {s.get('nproc')} ranks: median us per op (lower is better)",
        groups,
        unit="us",
        colours=text.colours(libraries),
    )
    return "\n\n".join(parts), svg


def _peer_patterns(record: dict) -> tuple[str, None]:
    rows = record["results"]
    libraries = list(dict.fromkeys(r["library"] for r in rows))
    parts = [
        "Each cell: the library's time per op beyond the compute in us (median of "
        f"{record['settings'].get('rounds')} rounds), then its ratio to fastcomm's (> 1: fastcomm faster). "
        "`skew`: all_reduce after a random 0-W us of compute on each rank; `pingpong`: two ranks pass one "
        "message back and forth, the sender computing 0-W us first. `fastcomm-backend` is fastcomm called on "
        "the backend object: its gap to `fastcomm` is torch.distributed's own call cost, which Gloo pays too."
    ]
    conditions = list(dict.fromkeys((r["nproc"], r["condition"]) for r in rows))
    for nproc, condition in conditions:
        mine = [r for r in rows if (r["nproc"], r["condition"]) == (nproc, condition)]
        at = {(r["pattern"], r.get("size"), r.get("width_us"), r["library"]): r for r in mine}
        cells = list(dict.fromkeys((r["pattern"], r["size"], r["width_us"]) for r in mine if "size" in r))
        body = []
        for pattern, size, width in cells:
            base = at.get((pattern, size, width, "fastcomm"), {}).get("us_per_op")
            line = [pattern, text.size(size), str(width)]
            for lib in libraries:
                r = at.get((pattern, size, width, lib))
                if r is None:
                    line.append("-")
                    continue
                cell = f"{r['us_per_op']:.1f}"
                if lib != "fastcomm" and base:
                    cell += f", {r['us_per_op'] / base:.2f}x"
                line.append(cell)
            body.append(line)
        where = "quiet host" if condition == "quiet" else "beside a busy neighbour process"
        parts.append(f"**{nproc} ranks, {where}** (us per op):")
        parts.append(text.table(["pattern", "size", "W (us)", *libraries], body, "llr" + "r" * len(libraries)))
        kept = [r for r in mine if r["pattern"] == "neighbour"]
        if kept:
            parts.append(
                "What the neighbour got done beside each library, as a share of what it does alone: "
                + ", ".join(f"{r['library']} {r['neighbour_kept']:.0%}" for r in kept)
                + "."
            )
    return "\n\n".join(parts), None


SECTIONS = [
    Section(
        "allreduce_vs_gloo",
        "Collectives against Gloo",
        "fastcomm and Gloo in the same processes and run, timed in alternating rounds per size; every size's "
        "result is checked once on both. Ratio: Gloo's time / fastcomm's (> 1: fastcomm faster).",
        "python benchmarks/allreduce_vs_gloo.py",
        _allreduce_vs_gloo,
    ),
    Section(
        "arena_vs_ordinary",
        "Arena tensors against ordinary tensors",
        "The same collective on tensors in fastcomm's shared-memory arena (read in place by the peers), on "
        "ordinary tensors and on Gloo. Ratios: the other's time / the arena's (> 1: the arena faster).",
        "python benchmarks/arena_vs_ordinary.py",
        _arena_vs_ordinary,
    ),
    Section(
        "multihost",
        "Across hosts",
        "Two namespace hosts joined by links shaped with tc: fastcomm-bench --compare gloo per collective and "
        "an FSDP2 step, each launched with torchrun as a user would (needs root). Ratio: Gloo's time / "
        "fastcomm's.",
        "python benchmarks/multihost.py",
        _multihost,
    ),
    Section(
        "peers",
        "all_reduce against MPI, DeepSpeed and oneCCL",
        "Every library runs the same in-place float32 SUM all_reduce with the same method, in interleaved "
        "rounds (benchmarks/peers/run.py; `bash benchmarks/peers/setup.sh` installs the peers).",
        "python benchmarks/peers/run.py",
        _peers,
    ),
    Section(
        "peer_patterns",
        "Skewed arrivals and point-to-point against MPI",
        "Collectives and send/recv as training calls them: from Python, no barrier before an op, ranks "
        "arriving apart, quiet and beside a busy process (benchmarks/peers/patterns.py; fastcomm and Gloo "
        "through torch.distributed, MPICH and Open MPI through mpi4py).",
        "python benchmarks/peers/patterns.py",
        _peer_patterns,
    ),
]
