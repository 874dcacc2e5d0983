"""Single-process kernel benchmarks (pytest-benchmark suites).

    pytest benchmarks/kernels --benchmark-only                       # the tables
    pytest benchmarks/kernels --benchmark-only --benchmark-autosave  # + JSON under .benchmarks/
    pytest benchmarks/kernels --benchmark-only --benchmark-compare   # against the last saved run
    pytest benchmarks/kernels --benchmark-disable                    # each case once, as a smoke test

Each group holds a fastcomm kernel with its peers measured in the same run:
a plain copy of the same buffer (the memory-bandwidth reference) and, where
one exists, the torch ops that do the same job in torch's own code; the
parenthesised factors pytest-benchmark prints inside a group are the
ratios. `extra_info["bytes"]` is what the kernel must read and write at
least, so GB/s = bytes / time. One torch thread (FASTCOMM_BENCH_THREADS to
change), the best instruction-set level unless --isa caps it.
"""
import os

import pytest
import torch


def pytest_addoption(parser):
    parser.addoption("--isa", default=None, choices=["baseline", "avx2", "avx512"],
                     help="cap fastcomm's CPU kernels at this instruction-set level")


@pytest.fixture(autouse=True, scope="session")
def _setup(pytestconfig):
    from fastcomm import _C

    torch.set_num_threads(int(os.environ.get("FASTCOMM_BENCH_THREADS", "1")))
    level = pytestconfig.getoption("--isa")
    if level is not None:
        _C.set_isa_cap(getattr(_C.Isa, level))
    yield
    _C.set_isa_cap(_C.Isa.avx512)
