"""Shared by the kernel benchmark suites."""


def run(benchmark, fn, nbytes: int):
    """Times fn with pytest-benchmark and records the bytes it moves."""
    benchmark.extra_info["bytes"] = nbytes
    benchmark(fn)
