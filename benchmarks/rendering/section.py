"""One benchmark's section of docs/benchmarks.md."""

from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Section:
    name: str  # the records' "benchmark"
    title: str
    about: str  # what it measures and how to read its ratios (markdown)
    run: str  # the command that writes its record, from the repository root
    body: Callable[[dict], tuple[str, str | None]]  # record -> (markdown tables, SVG plot or None)
