"""Markdown pieces every section uses: sizes, numbers, tables, a record's provenance,
and text between marker lines. Pure functions of their arguments: the same
record gives the same bytes."""

from __future__ import annotations

import datetime
import shlex

MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Series colours of the plots: fastcomm's in colour, everything else in greys and warm tones.
FASTCOMM_COLOURS = ("#1f77b4", "#2ca02c", "#17becf", "#9467bd")
OTHER_COLOURS = ("#9e9e9e", "#bdbdbd", "#ff7f0e", "#d62728", "#8c564b", "#e377c2")


def size(n: int | None) -> str:
    """Bytes as 8 B, 4 KiB, 64 MiB (binary units where they divide evenly)."""
    if n is None:
        return ""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def params(n: int) -> str:
    """A parameter count in millions: 124M, 0.3M."""
    return f"{n / 1e6:.0f}M" if n >= 10e6 else f"{n / 1e6:.1f}M"


DTYPE_NAMES = {"float": "float32", "half": "float16", "double": "float64"}  # fastcomm-bench's names


def dtype(name: str | None) -> str:
    return DTYPE_NAMES.get(name, str(name))


def number(x: float | None, digits: int = 2, scale: float = 1.0) -> str:
    """x * scale with `digits` decimals; '-' for a missing value."""
    return "-" if x is None else f"{x * scale:.{digits}f}"


def ratio(numerator: float | None, denominator: float | None) -> str:
    """numerator / denominator to 2 decimals; '-' where either is missing or the denominator is 0."""
    if numerator is None or not denominator:
        return "-"
    return f"{numerator / denominator:.2f}"


def table(header: list[str], rows: list[list[str]], align: str | None = None) -> str:
    """A markdown table; `align`: one letter per column, l or r (default: first l, rest r)."""
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if a == "l" else "---:" for a in align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def colours(series: list[str]) -> dict[str, str]:
    """A colour per series name: fastcomm's series in colour, the others in greys and warm tones."""
    out, fc, other = {}, 0, 0
    for name in series:
        if name in out:
            continue
        if name.startswith("fastcomm") or name in ("arena", "ordinary"):
            out[name] = FASTCOMM_COLOURS[fc % len(FASTCOMM_COLOURS)]
            fc += 1
        else:
            out[name] = OTHER_COLOURS[other % len(OTHER_COLOURS)]
            other += 1
    return out


def measured(date: str | None) -> str:
    """A record's UTC timestamp as 'measured 6 Dec 2026' ('date not recorded' without one)."""
    if not date:
        return "date not recorded"
    when = datetime.datetime.fromisoformat(date)
    return f"measured {when.day} {MONTHS[when.month - 1]} {when.year}"


def machine(record: dict) -> str:
    m = record.get("machine") or {}
    parts = [m.get("cpu_model") or "CPU model not recorded"]
    if m.get("cores"):
        parts.append(f"{m['cores']} CPUs")
    if m.get("memory_gib"):
        parts.append(f"{m['memory_gib']} GiB")
    if m.get("kernel"):
        parts.append(m["kernel"])
    if m.get("arch"):
        parts.append(m["arch"])
    return ", ".join(parts)


def versions(record: dict) -> str:
    names = {"python": "Python", "torch": "torch", "fastcomm": "fastcomm"}
    items = [f"{names.get(k, k)} {v}" for k, v in (record.get("versions") or {}).items() if v]
    return ", ".join(items) or "not recorded"


def commit(record: dict) -> str:
    sha = record.get("commit")
    if not sha:
        return "commit not recorded"
    dirty = {True: " with uncommitted changes", False: "", None: ""}[record.get("dirty")]
    return f"commit {sha[:10]}{dirty}"


def provenance(record: dict, path: str) -> str:
    """What was run, where and on what: the command, machine, versions, commit and day, and where the
    record lies (`path`, from the repository root: text, not a link, as the docs site holds only docs/)."""
    return "\n".join(
        [
            f"Run: `{shlex.join(record.get('command') or [])}`, record `{path}`  ",
            f"Machine: {machine(record)}  ",
            f"Versions: {versions(record)}; {commit(record)}; {measured(record.get('date'))}",
        ]
    )


def between_markers(doc: str, begin: str, end: str, text: str) -> str | None:
    """`doc` with the lines strictly between the lines `begin` and `end` replaced by `text`;
    None when either marker line is missing (or they are out of order)."""
    lines = doc.split("\n")
    try:
        first = lines.index(begin)
        last = lines.index(end, first + 1)
    except ValueError:
        return None
    return "\n".join(lines[: first + 1] + text.split("\n") + lines[last:])
