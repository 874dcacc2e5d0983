"""The one place fastcomm reads environment variables (all listed in README.md)."""
from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class Options:
    # Worker threads of the internal Gloo backend (Gloo's own default is 2).
    gloo_threads: int = 2


def _positive_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"fastcomm: environment variable {name} must be a positive integer, got {raw!r}") from None
    if value < 1:
        raise ValueError(f"fastcomm: environment variable {name} must be a positive integer, got {raw!r}")
    return value


def read_options() -> Options:
    """Options from the environment, read when a process group is created."""
    return Options(gloo_threads=_positive_int("FASTCOMM_GLOO_THREADS", Options.gloo_threads))
