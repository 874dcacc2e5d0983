"""The section of benchmarks/ddp_bucket_profile.py: where a DDP step's
communication time goes, per step phase and per bucket."""

from __future__ import annotations

from rendering import text
from rendering.section import Section
from rendering.training import MODEL_NAMES

MODES = {
    "local": "local (no DDP)",
    "noop": "DDP, no communication (noop hook)",
    "default": "DDP, its own all_reduce",
    "profiled": "DDP, profiling hook",
}


def _ms(seconds: float | None) -> str:
    return text.number(seconds, 0, 1e3)


def _phases(row: dict) -> str:
    body = []
    for mode, label in MODES.items():
        ph = row[mode]["phases"]
        faults = sum(ph[f"{p}_faults"] for p in ("forward", "backward", "optimizer"))
        system = sum(ph[f"{p}_system_s"] for p in ("forward", "backward", "optimizer"))
        body.append(
            [
                label,
                _ms(ph["step_s"]),
                _ms(ph["forward_s"]),
                _ms(ph["backward_s"]),
                _ms(ph["optimizer_s"]),
                _ms(ph["main_cpu_s"]),
                _ms(ph["other_cpu_s"]),
                _ms(system),
                f"{faults / 1e3:.0f}k",
                _ms(ph.get("tail_s")),
            ]
        )
    return text.table(
        [
            "configuration",
            "step",
            "forward",
            "backward",
            "optimizer",
            "caller's thread CPU",
            "other threads CPU",
            "kernel time",
            "page faults",
            "backward after last bucket",
        ],
        body,
        "lrrrrrrrrr",
    )


def _buckets(row: dict) -> str:
    buckets = row["profiled"]["buckets"]
    body = [
        [
            str(b["index"]),
            f"{b['bytes'] / 2**20:.1f}",
            _ms(b["ready_s"]),
            text.number(b["skew_s"], 1, 1e3),
            text.number(b["transfer_s"], 1, 1e3),
            f"{b['bytes'] / b['transfer_s'] / 1e9:.1f}" if b["transfer_s"] > 0 else "",
        ]
        for b in buckets
    ]
    body.append(
        [
            "all",
            f"{sum(b['bytes'] for b in buckets) / 2**20:.0f}",
            "",
            text.number(sum(b["skew_s"] for b in buckets), 1, 1e3),
            text.number(sum(b["transfer_s"] for b in buckets), 1, 1e3),
            "",
        ]
    )
    return text.table(["bucket", "MiB", "ready at (ms)", "skew (ms)", "all_reduce (ms)", "GB/s"], body, "rrrrrr")


def _ddp_bucket_profile(record: dict) -> tuple[str, None]:
    s = record["settings"]
    head = (
        f"{s.get('nproc')} ranks, one torch thread each; median of {s.get('steps')} steps x {s.get('passes')} "
        f"pass(es) per configuration; gradient_as_bucket_view={bool(s.get('view'))}. Times in ms: step phases on "
        "the slowest rank; CPU, kernel time and page faults per rank and step (kernel time and faults: the "
        "caller's thread, which runs forward, backward and the optimizer); per bucket, when its gradients were "
        "ready (from the step's start), how long the first rank waited for the last (skew) and the all_reduce "
        "once all had arrived."
    )
    parts = [head]
    for row in record["results"]:
        where = f"beside {row['busy']} busy process(es)" if row["busy"] else "quiet"
        name = MODEL_NAMES.get(row["model"], row["model"])
        parts.append(f"**{name} on {row['backend']}, {where}**\n\n{_phases(row)}\n\n{_buckets(row)}")
    return "\n\n".join(parts), None


SECTIONS = [
    Section(
        "ddp_bucket_profile",
        "Where a DDP step's time goes",
        "GPT-2 small under DDP, each bucket's all_reduce timed on every rank with the host's monotonic clock "
        "(a hook that does what DDP's own all_reduce does), beside the same step without the hook and "
        "without DDP; per-thread CPU time and page faults from the kernel's accounting.",
        "python benchmarks/ddp_bucket_profile.py",
        _ddp_bucket_profile,
    ),
]
