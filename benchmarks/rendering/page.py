"""docs/benchmarks.md: a section per benchmark, in SECTIONS' order, each with
what its record says was run and its tables and plot; "no record yet" where
benchmarks/results/ has none."""

from __future__ import annotations

import re

from rendering import collectives, components, profile, text, training

_BY_NAME = {s.name: s for s in collectives.SECTIONS + training.SECTIONS + profile.SECTIONS + components.SECTIONS}
ORDER = [
    "allreduce_vs_gloo",
    "ddp_training",
    "real_models",
    "ddp_bucket_profile",
    "fsdp2_vs_gloo",
    "pipeline_vs_gloo",
    "hooks_vs_torch",
    "syncbn_vs_torch",
    "sync_convergence",
    "arena_vs_ordinary",
    "peers",
    "peer_patterns",
    "multihost",
    "kernels",
]
SECTIONS = [_BY_NAME[name] for name in ORDER]
assert sorted(ORDER) == sorted(_BY_NAME), "every section has its place in ORDER"

INTRO = """# Benchmarks

Every benchmark script writes a JSON record to `benchmarks/results/` (the
machine, the versions, the commit, the command, its settings and every row);
`python benchmarks/render.py` makes this page, its plots, the README's headline
table and docs/training.md's table from those records, and
`python benchmarks/render.py --check` fails where they differ. Nothing here is
typed by hand. Unless a table says otherwise, a ratio is the other side's time
/ fastcomm's: above 1, fastcomm is faster."""


def anchor(title: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^a-z0-9 _-]", "", title.lower()).replace(" ", "-")


def page(records: list[tuple[str, dict]], results: str) -> tuple[str, dict[str, str]]:
    """(the page's markdown, {plot file name: SVG}); `records`: (file stem, record), sorted by stem;
    `results`: the records' folder from the repository root."""
    plots: dict[str, str] = {}
    parts = [INTRO, "\n".join(f"- [{s.title}](#{anchor(s.title)})" for s in SECTIONS)]
    known = set(_BY_NAME)
    for section in SECTIONS:
        mine = [(stem, r) for stem, r in records if r["benchmark"] == section.name]
        parts.append(f"## {section.title}\n\n{section.about}")
        if not mine:
            parts.append(
                f"No record yet: `{section.run}` writes `benchmarks/results/{section.name}.json`, then "
                "`python benchmarks/render.py` renders it here."
            )
        for stem, record in mine:
            if len(mine) > 1:
                parts.append(f"### {stem}")
            body, svg = section.body(record)
            parts.append(text.provenance(record, f"{results}/{stem}.json"))
            parts.append(body)
            if svg is not None:
                plots[f"{stem}.svg"] = svg
                parts.append(f"![{section.title}]({stem}.svg)")
    other = [stem for stem, r in records if r["benchmark"] not in known]
    if other:
        parts.append("## Other records\n\nNo section renders these: " + ", ".join(f"`{s}.json`" for s in other) + ".")
    return "\n\n".join(parts) + "\n", plots
