"""The benchmark scripts run end to end (tiny sizes; the times are not checked,
only that both backends were timed, each size's result was exact on both, and
the table is complete)."""
import os
import re
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks")


@pytest.mark.parametrize("api, op, extra", [
    ("dist", "all_reduce", []),
    ("process_group", "reduce_scatter", []),
    ("cpp", "all_to_all", []),
    ("cpp", "all_reduce", ["--nproc", "4", "--ranks-per-host", "2"]),
])
def test_allreduce_vs_gloo_prints_a_row_per_size(api, op, extra):
    out = subprocess.run(
        [sys.executable, os.path.join(BENCHMARKS, "allreduce_vs_gloo.py"), "--api", api, "--op", op,
         "--sizes", "8,4K", "--seconds", "0.02", "--rounds", "1", "--warmup", "1", *extra],
        capture_output=True, text=True, timeout=240,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    rows = re.findall(r"^\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)$", out.stdout, re.M)
    nproc = int(extra[1]) if extra else 2
    smallest = 4 * nproc if op in ("reduce_scatter", "all_to_all") else 8  # split ops: a float per rank at least
    assert [int(r[0]) for r in rows] == [smallest, 4096], out.stdout
    assert "WRONG" not in out.stdout
    assert all(float(r[1]) > 0 and float(r[2]) > 0 for r in rows), out.stdout
    assert f"api {api}" in out.stdout
