"""The one place fastcomm reads environment variables (all listed in README.md)."""
from __future__ import annotations

import dataclasses
import os


@dataclasses.dataclass(frozen=True)
class Options:
    # Worker threads of the internal Gloo backend (Gloo's own default is 2).
    gloo_threads: int = 2
    # CPU all_reduce of at most this many bytes runs as one all_gather plus a
    # local reduction (allreduce_via_allgather); 0 turns that off. Measured: docs/algorithms.md.
    allreduce_allgather_max_bytes: int = 64 << 10


def _int_at_least(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    kind = "a positive" if minimum == 1 else "a non-negative"
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"fastcomm: environment variable {name} must be {kind} integer, got {raw!r}") from None
    if value < minimum:
        raise ValueError(f"fastcomm: environment variable {name} must be {kind} integer, got {raw!r}")
    return value


def read_options() -> Options:
    """Options from the environment, read when a process group is created."""
    return Options(
        gloo_threads=_int_at_least("FASTCOMM_GLOO_THREADS", Options.gloo_threads, 1),
        allreduce_allgather_max_bytes=_int_at_least(
            "FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES", Options.allreduce_allgather_max_bytes, 0
        ),
    )
