"""docs/examples/parameter_server.py under torchrun: synchronous (reduce + broadcast) and asynchronous (p2p) servers."""

import json
import os
import re
import subprocess
import sys

import pytest
from test_launch import _free_port

EXAMPLE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "examples", "parameter_server.py"
)


@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_parameter_server(mode, nproc, tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc_per_node={nproc}",
        "--master_addr=127.0.0.1",
        f"--master_port={_free_port()}",
        EXAMPLE,
        "--mode",
        mode,
        "--steps",
        "40",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    (line,) = re.findall(r"RESULT (.*)", out.stdout)
    result = json.loads(line)
    assert result["mode"] == mode and result["ok"], result
    if mode == "sync":
        assert result["max_difference_from_single_process"] < 1e-5, result
    else:
        assert result["applied"] == {str(w): 40 for w in range(1, nproc)}, result
