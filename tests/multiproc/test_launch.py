"""Launchers and timeouts, each in fresh processes."""

import os
import re
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("nproc", [2, 3])
def test_torchrun_env_rendezvous(nproc):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        os.path.join(PROGRAMS, "torchrun_job.py"),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    expected = sum(range(1, nproc + 1)) / nproc
    for r in range(nproc):
        assert f"rank {r}/{nproc} ok {expected}" in out.stdout, out.stdout


@pytest.mark.parametrize("scenario", ["absent_peer", "silent_peer"])
def test_missing_rank_errors_within_timeout(scenario, tmp_path):
    """Group timeout is 3 s: the error must come, naming a timeout, well before any hang limit."""
    out = subprocess.run(
        [sys.executable, os.path.join(PROGRAMS, "timeouts.py"), scenario, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r"RESULT (\d+\.\d+) (\w+): (.*)", out.stdout)
    assert m, out.stdout + out.stderr
    elapsed, message = float(m.group(1)), m.group(3)
    assert re.search(r"[Tt]imed? ?out|timeout", message), message
    # not before the timeout (it is a real wait), and not a hang: within the timeout plus slack for start-up
    assert 2.5 <= elapsed <= 30, elapsed
