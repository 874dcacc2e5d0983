"""The doctor's findings: one Item per fact, rendered as plain text or JSON.

Each item says what was found (`value`), whether fastcomm can use it
(`status`), why not (`why`), what to do about it (`fix`) and, for any
status, what else to know (`note`). Statuses:
"ok" (usable as is), "off" (a fast path is off here), "warn" (works, but
something will hurt: performance or multi-host set-up), "info" (a fact with
no verdict).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

STATUSES = ("ok", "off", "warn", "info")


@dataclasses.dataclass(frozen=True)
class Item:
    section: str
    name: str
    status: str
    value: str
    why: str = ""
    fix: str = ""
    note: str = ""
    # Machine-readable details (numbers, lists) for --json; not printed.
    data: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"Item {self.name!r}: status must be one of {STATUSES}, got {self.status!r}")


def to_json(items: list[Item], algorithms: dict | None) -> str:
    """The whole report as one JSON object: {"items": [...], "algorithms": {...} or null}."""
    return json.dumps(
        {"items": [dataclasses.asdict(item) for item in items], "algorithms": algorithms}, indent=2, sort_keys=False
    )


def to_text(items: list[Item]) -> str:
    """One line per item under its section's heading, then its why and fix indented."""
    lines: list[str] = []
    section = None
    width = max((len(item.name) for item in items), default=0)
    for item in items:
        if item.section != section:
            section = item.section
            if lines:
                lines.append("")
            lines.append(f"== {section}")
        lines.append(f"  [{item.status:<4}] {item.name:<{width}}  {item.value}")
        if item.why:
            lines.append(f"  {'':6} {'':<{width}}  why: {item.why}")
        if item.fix:
            lines.append(f"  {'':6} {'':<{width}}  fix: {item.fix}")
        if item.note:
            lines.append(f"  {'':6} {'':<{width}}  note: {item.note}")
    return "\n".join(lines)
