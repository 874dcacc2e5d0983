"""Single-process kernel benchmarks (pytest-benchmark suites).

    pytest benchmarks/kernels --benchmark-only                       # the tables, and the record
    pytest benchmarks/kernels --benchmark-only --benchmark-autosave  # + pytest-benchmark's JSON under .benchmarks/
    pytest benchmarks/kernels --benchmark-only --benchmark-compare   # against the last saved run
    pytest benchmarks/kernels --benchmark-disable                    # each case once, as a smoke test

Each group holds a fastcomm kernel with its peers measured in the same run:
a plain copy of the same buffer (the memory-bandwidth reference) and, where
one exists, the torch ops that do the same job in torch's own code; the
parenthesised factors pytest-benchmark prints inside a group are the
ratios. `extra_info["bytes"]` is what the kernel must read and write at
least, so GB/s = bytes / time. One torch thread (FASTCOMM_BENCH_THREADS to
change), the best instruction-set level unless --isa caps it.

A timed run writes every case's statistics as a JSON record
(benchmarks/results/kernels.json unless --record PATH or --no-record;
benchmarks/render.py makes the docs' tables from it).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import bench_helpers  # noqa: E402
import results_record  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--isa",
        default=None,
        choices=["baseline", "avx2", "avx512"],
        help="cap fastcomm's CPU kernels at this instruction-set level",
    )
    parser.addoption(
        "--record",
        default=None,
        metavar="PATH",
        help="write the JSON record here (default benchmarks/results/kernels.json)",
    )
    parser.addoption("--no-record", action="store_true", help="write no record")


def pytest_configure(config):
    from fastcomm import _C

    torch.set_num_threads(int(os.environ.get("FASTCOMM_BENCH_THREADS", "1")))
    level = config.getoption("--isa")
    if level is not None:
        _C.set_isa_cap(getattr(_C.Isa, level))


def pytest_unconfigure(config):
    from fastcomm import _C

    _write_record(config)
    _C.set_isa_cap(_C.Isa.avx512)


def _write_record(config):
    """The record of a timed run (nothing when timing was off or nothing ran)."""
    if not bench_helpers.MEASURED or config.getoption("--no-record"):
        return
    root = results_record.repo_root(__file__)
    path = config.getoption("--record") or results_record.default_path(root, "kernels")
    settings = {"isa": config.getoption("--isa"), "threads": torch.get_num_threads()}
    command = results_record.command(["pytest"], [str(a) for a in config.invocation_params.args], root)
    record = results_record.build("kernels", settings, bench_helpers.MEASURED, command=command, root=root)
    results_record.write(record, path)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"# record: {config.getoption('--record') or os.path.relpath(path)}")
