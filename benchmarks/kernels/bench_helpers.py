"""Shared by the kernel benchmark suites."""

# One entry per timed case, in the order they ran: conftest.py writes them as the record's rows.
MEASURED: list[dict] = []


def run(benchmark, fn, nbytes: int):
    """Times fn with pytest-benchmark and records the bytes it moves (and, when
    timing is on, the case's statistics for the record)."""
    benchmark.extra_info["bytes"] = nbytes
    benchmark(fn)
    stats = getattr(benchmark, "stats", None)  # None with --benchmark-disable
    if stats is not None and stats.stats.rounds:
        s = stats.stats
        MEASURED.append(
            {
                "group": benchmark.group,
                "case": (benchmark.params or {}).get("impl") or benchmark.name,
                "bytes": nbytes,
                "median_s": s.median,
                "mean_s": s.mean,
                "min_s": s.min,
                "iqr_s": s.iqr,
                "rounds": s.rounds,
                "iterations": stats.iterations,
            }
        )
