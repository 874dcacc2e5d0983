"""The doctor's algorithm table (python -m fastcomm.doctor --world-size N --json)
against what a separate group of ranks, written here without the doctor's
code, launches for the same calls: the second call of each size, read from
the backend's algorithm_counts() before and after it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest
from harness import run_ranks

# One rank of the separate group: argv = rank, world size, store path, then
# "collective:bytes" cases; prints one JSON line {case: [[name, launches], ...]}.
# Sizes mean what fastcomm-bench means: the bytes of the largest buffer
# (all_gather: its output, split evenly over the ranks).
RANK_PROGRAM = r"""
import json, sys
import torch, torch.distributed as dist
import fastcomm
rank, world, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
dist.init_process_group("fastcomm", store=dist.FileStore(path, world), rank=rank, world_size=world)
backend = fastcomm.fastcomm_backend()
order = list(backend.algorithm_names())
out = {}
for case in sys.argv[4:]:
    name, size = case.split(":")
    count = int(size) // 4
    if name == "all_reduce":
        t = torch.zeros(count)
        call = lambda: dist.all_reduce(t)
    elif name == "all_gather":
        count -= count % world
        out_t, in_t = torch.zeros(count), torch.zeros(count // world)
        call = lambda: dist.all_gather_into_tensor(out_t, in_t)
    elif name == "broadcast":
        t = torch.zeros(count)
        call = lambda: dist.broadcast(t, src=0)
    call()
    before = backend.algorithm_counts()
    call()
    after = backend.algorithm_counts()
    out[case] = [[n, after[n] - before.get(n, 0)] for n in order if after.get(n, 0) > before.get(n, 0)]
print("RESULT " + json.dumps(out), flush=True)
dist.barrier()
dist.destroy_process_group()
"""

COLLECTIVES = ("all_reduce", "all_gather", "broadcast")
MAX_BYTES = 4 << 20


def _doctor(world_size: int, *layout: str) -> dict:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastcomm.doctor",
            "--json",
            "--no-probe",
            "--world-size",
            str(world_size),
            *layout,
            "--max-bytes",
            str(MAX_BYTES),
            "--collectives",
            ",".join(COLLECTIVES),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout
    return json.loads(out)


def _separate_group(world_size: int, cases: list[str], env: dict) -> dict:
    with tempfile.TemporaryDirectory(prefix="fastcomm-doctor-test-") as tmp:
        store = os.path.join(tmp, "store")
        output = run_ranks(
            lambda r: [sys.executable, "-c", RANK_PROGRAM, str(r), str(world_size), store, *cases],
            [env] * world_size,
            timeout=300,
        )
    results = [json.loads(line[len("RESULT ") :]) for line in output.splitlines() if line.startswith("RESULT ")]
    assert len(results) == world_size, output[-3000:]
    return results[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    "world_size, layout, env",
    [
        (2, (), {}),
        (4, ("--hosts", "2"), {"FASTCOMM_RANKS_PER_HOST": "2"}),
    ],
    ids=["ws2", "ws4-2hosts"],
)
def test_table_matches_a_real_group(world_size, layout, env):
    report = _doctor(world_size, *layout)
    table = report["algorithms"]
    assert table["layout"]["world_size"] == world_size
    assert table["layout"]["hosts"] == (2 if layout else 1)
    predicted = {}
    for name in COLLECTIVES:
        for cell in table["rows"][name]:
            if "steady" in cell:
                predicted[f"{name}:{cell['bytes']}"] = cell["steady"]
    assert len(predicted) >= len(COLLECTIVES) * 10  # 8 B .. 4 MiB, less what does not split
    ran = _separate_group(world_size, sorted(predicted), env)
    assert ran == predicted
