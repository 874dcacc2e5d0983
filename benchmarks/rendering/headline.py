"""The README's headline table: the few numbers a user asks first, fastcomm
against Gloo: a real model's DDP step (real_models) and all_reduce at a few
sizes (allreduce_vs_gloo), from the canonical records
(benchmarks/results/<benchmark>.json)."""

from __future__ import annotations

from rendering import text
from rendering.training import model_label

BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"
SIZES = (8, 32 << 10, 1 << 20, 64 << 20)  # all_reduce sizes shown, where the record has them


def duration(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.1f} us"


def _ddp_rows(record: dict) -> list[list[str]]:
    rows = []
    for r in record["results"]:
        steps = r["step_s"]
        if r.get("busy") or "gloo" not in steps:
            continue
        for config, how in (
            ("fastcomm", "DDP's defaults on both"),
            ("fastcomm+view", "fastcomm with gradient_as_bucket_view=True"),
        ):
            if config in steps:
                rows.append(
                    [
                        f"{model_label(r)} DDP step, {how}",
                        duration(steps[config]),
                        duration(steps["gloo"]),
                        text.ratio(steps["gloo"], steps[config]),
                    ]
                )
    return rows


def _allreduce_rows(record: dict) -> list[list[str]]:
    s = record["settings"]
    return [
        [
            f"{s.get('op')} {text.dtype(s.get('dtype'))}, {text.size(r['bytes'])}",
            duration(r["fastcomm_s"]),
            duration(r["gloo_s"]),
            text.ratio(r["gloo_s"], r["fastcomm_s"]),
        ]
        for r in record["results"]
        if r["bytes"] in SIZES
    ]


def _source(what: str, record: dict, link: str) -> str:
    m = record.get("machine") or {}
    machine = ", ".join(x for x in (m.get("cpu_model"), f"{m['cores']} CPUs" if m.get("cores") else None) if x)
    return (
        f"{what}: [record]({link}), {record['settings'].get('nproc')} ranks on {machine or 'an unrecorded machine'}, "
        f"{text.commit(record)}, {text.measured(record.get('date'))}"
    )


def headline(real_models: dict | None, allreduce: dict | None, page_link: str, results_link: str) -> str:
    """The markdown between the README's markers; links relative to the README."""
    rows, notes = [], []
    for record, name, what, make in (
        (real_models, "real_models", "DDP steps", _ddp_rows),
        (allreduce, "allreduce_vs_gloo", "all_reduce", _allreduce_rows),
    ):
        if record is None:
            notes.append(f"{what}: no record yet (`python benchmarks/{name}.py`)")
        else:
            rows += make(record)
            notes.append(_source(what, record, f"{results_link}/{name}.json"))
    lines = (
        [text.table(["fastcomm against Gloo, CPU", "fastcomm", "Gloo", "Gloo / fastcomm"], rows), ""] if rows else []
    )
    lines.append(
        "Gloo / fastcomm > 1: fastcomm is faster. " + "; ".join(notes) + ". Generated from the records by "
        f"`python benchmarks/render.py`; every table and plot, and how each was run: "
        f"[docs/benchmarks.md]({page_link})."
    )
    return "\n".join(lines)
