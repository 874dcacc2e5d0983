"""The kernel benchmark suites (benchmarks/kernels, pytest-benchmark) run: each
case once with timing off, so they cannot rot unnoticed. Timing itself is for
people, not CI (docs/benchmarks.md)."""

import os
import subprocess
import sys
import tempfile

SUITES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "kernels")


def test_kernel_benchmark_suites_run():
    # Run outside the checkout, so the installed fastcomm is imported (the CUDA
    # build's CI step installs it non-editable), not the source tree's.
    with tempfile.TemporaryDirectory() as cwd:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "--benchmark-disable",
                os.path.abspath(SUITES),
            ],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=cwd,
        )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert " passed" in out.stdout and " failed" not in out.stdout, out.stdout[-2000:]
