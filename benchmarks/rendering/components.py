"""Sections of the component benchmarks: the DDP hooks and SyncBatchNorm against
torch's own, and the single-process kernels against torch and a plain copy."""

from __future__ import annotations

from fastcomm.bench.svg import grouped_bars

from rendering import text
from rendering.section import Section


def _hooks_vs_torch(record: dict) -> tuple[str, str]:
    s, rows = record["settings"], record["results"]
    buckets = "in the arena" if s.get("arena") else "ordinary"
    head = (
        f"{s.get('nproc')} ranks x {s.get('threads')} thread(s), {s.get('backend')} group, buckets {buckets}; "
        f"median of {s.get('rounds')} alternating rounds, slowest rank. call: the hook on one step's buckets; "
        "step: DDP forward + backward; error: |g - exact| / |exact| after warm-up; compression: raw / wire "
        "bytes. Ratios: torch's / fastcomm's (> 1: fastcomm faster)."
    )
    body, groups = [], []
    for r in rows:
        restore = r["restore_s"] or 0.0
        fc_call = r["fastcomm_call_s"] - restore
        torch_call = r["torch_call_s"] - restore if r["torch_call_s"] is not None else None
        if r["torch_refused"]:
            torch_cells = [f"refused ({r['torch_refused']})", "-", "-", "-"]
        else:
            torch_cells = [
                text.number(torch_call, 2, 1e3),
                text.ratio(torch_call, fc_call),
                text.number(r["torch_step_s"], 2, 1e3),
                text.ratio(r["torch_step_s"], r["fastcomm_step_s"]),
            ]
        body.append(
            [
                r["model"],
                r["hook"],
                text.number(fc_call, 2, 1e3),
                torch_cells[0],
                torch_cells[1],
                text.number(r["fastcomm_step_s"], 2, 1e3),
                torch_cells[2],
                torch_cells[3],
                text.number(r["local_step_s"], 2, 1e3),
                "-" if r["fastcomm_error"] is None else f"{r['fastcomm_error']:.1e}",
                "-" if r["torch_error"] is None else f"{r['torch_error']:.1e}",
                f"{r['compression']:.1f}",
            ]
        )
        if torch_call is not None and not r["torch_refused"]:
            groups.append((f"{r['model']} {r['hook']}", [("torch", torch_call * 1e3), ("fastcomm", fc_call * 1e3)]))
    table = text.table(
        [
            "model",
            "hook",
            "fastcomm call (ms)",
            "torch call (ms)",
            "ratio",
            "fastcomm step (ms)",
            "torch step (ms)",
            "ratio",
            "no_sync step (ms)",
            "fastcomm error",
            "torch error",
            "compression",
        ],
        body,
        "llrrrrrrrrrr",
    )
    svg = (
        grouped_bars(
            "DDP hooks: ms per call on one step's buckets (lower is better)",
            groups,
            unit="ms",
            colours=text.colours(["torch", "fastcomm"]),
        )
        if groups
        else None
    )
    return f"{head}\n\n{table}", svg


def _syncbn_vs_torch(record: dict) -> tuple[str, str]:
    s, rows = record["settings"], record["results"]
    head = (
        f"forward + backward of one layer, {s.get('dtype')}, {s.get('nproc')} ranks x {s.get('threads')} "
        f"thread(s), {s.get('backend')} group; median of {s.get('rounds')} alternating rounds, slowest rank. "
        "comm: two bare all_reduces of the packed statistics (the floor communication sets); local: the same "
        "step without collectives. Ratios: torch's / fastcomm's (> 1: fastcomm faster)."
    )
    count = lambda c: "-" if c is None else str(c)  # noqa: E731
    body = [
        [
            r["layer"],
            text.number(r["fastcomm_s"], 1, 1e6),
            text.number(r["torch_s"], 1, 1e6),
            text.ratio(r["torch_s"], r["fastcomm_s"]),
            text.number(r["comm_s"], 1, 1e6),
            text.number(r["fastcomm_local_s"], 1, 1e6),
            text.number(r["torch_local_s"], 1, 1e6),
            text.ratio(r["torch_local_s"], r["fastcomm_local_s"]),
            count(r["fastcomm_collectives"]),
            count(r["torch_collectives"]),
        ]
        for r in rows
    ]
    table = text.table(
        [
            "layer (per rank)",
            "fastcomm (us)",
            "torch (us)",
            "ratio",
            "comm (us)",
            "fastcomm local (us)",
            "torch local (us)",
            "ratio",
            "fastcomm collectives",
            "torch collectives",
        ],
        body,
    )
    groups = [(r["layer"], [("torch", r["torch_s"] * 1e6), ("fastcomm", r["fastcomm_s"] * 1e6)]) for r in rows]
    svg = grouped_bars(
        "SyncBatchNorm forward + backward: us per step (lower is better)",
        groups,
        unit="us",
        colours=text.colours(["torch", "fastcomm"]),
    )
    return f"{head}\n\n{table}", svg


def _fastcomm_reference(case: str, cases: list[dict]) -> float | None:
    """The median of the fastcomm case `case` is compared with (None: none)."""
    fastcomm = [r for r in cases if r["case"].split(" ")[0] == "fastcomm"]
    if case.split(" ")[0] == "fastcomm":
        return next(r["median_s"] for r in fastcomm if r["case"] == case)
    if len(fastcomm) == 1:
        return fastcomm[0]["median_s"]
    rest = case.partition(" ")[2]
    return next((r["median_s"] for r in fastcomm if rest and r["case"].partition(" ")[2] == rest), None)


def _kernels(record: dict) -> tuple[str, None]:
    s, rows = record["settings"], record["results"]
    isa = s.get("isa") or "the best this CPU has"
    head = (
        f"One process, {s.get('threads')} torch thread(s), instruction sets: {isa}; pytest-benchmark's median. "
        "GB/s: the bytes a kernel must read and write at least, per second. Ratio: the case's time / its "
        "fastcomm case's (> 1: fastcomm faster): the group's one fastcomm case, or the one of the same "
        "name after its first word (torch 4 sources: fastcomm 4 sources)."
    )
    body = []
    for group in dict.fromkeys(r["group"] for r in rows):
        cases = [r for r in rows if r["group"] == group]
        for r in cases:
            base = _fastcomm_reference(r["case"], cases)
            body.append(
                [
                    group,
                    r["case"],
                    text.number(r["median_s"], 1, 1e6),
                    f"{r['bytes'] / r['median_s'] / 1e9:.2f}",
                    text.ratio(r["median_s"], base),
                ]
            )
    table = text.table(["group", "case", "median (us)", "GB/s", "time / fastcomm's"], body, "llrrr")
    return f"{head}\n\n{table}", None


SECTIONS = [
    Section(
        "hooks_vs_torch",
        "DDP communication hooks against torch's",
        "fastcomm's DDP hooks against torch's hooks for the same compression, on the same model, group and "
        "buckets; int8, topk and sign have no torch peer (their rows show cost and compression).",
        "python benchmarks/hooks_vs_torch.py",
        _hooks_vs_torch,
    ),
    Section(
        "syncbn_vs_torch",
        "SyncBatchNorm against torch's algorithm",
        "fastcomm.nn.SyncBatchNorm against torch.nn.SyncBatchNorm's algorithm with its GPU kernels written as "
        "torch CPU ops (benchmarks/torch_syncbn_algorithm.py), in the same group and run.",
        "python benchmarks/syncbn_vs_torch.py",
        _syncbn_vs_torch,
    ),
    Section(
        "kernels",
        "CPU kernels",
        "fastcomm's reduction, compression and SyncBatchNorm kernels against the torch ops that do the same "
        "job and a plain copy of the same buffer (the memory-bandwidth reference); pytest-benchmark suites.",
        "pytest benchmarks/kernels --benchmark-only",
        _kernels,
    ),
]
