"""A collective that fails inside a training step raises on the surviving rank
instead of returning (with gradients or parameters that were never averaged):
every hook's backward pass, fastcomm.nn.SyncBatchNorm's backward pass and
fastcomm.sync.ModelSync, with a peer late past the group timeout and with a
killed peer (programs/comm_failures.py, fresh processes).

The runs start together when the first test asks for them: the late runs
mostly wait out timeouts, the kill runs mostly start processes; the kill runs
go one after the other (each has a process per case)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile

import pytest

from fastcomm.hooks import HOOK_NAMES

PROGRAM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs", "comm_failures.py")
CASES = [*HOOK_NAMES, "syncbn", "model_sync", "model_sync_int8", "model_sync_async"]
RUNS = {"late": [CASES[:6], CASES[6:]], "kill": [CASES[:6], CASES[6:]]}  # cases per program run
RUN_TIMEOUT = 150  # seconds; a run takes about 25
# The error of the failed collective itself (group rank 1 is the peer in every case's group).
ERRORS = {
    "late": r"DistBackendError: fastcomm \w+: timed out after 10000 ms waiting for rank\(s\) 1 ",
    "kill": r"DistBackendError: fastcomm \w+: rank 1 \(pid \d+\) on this host exited while rank 0 waited for it",
}


class _Run:
    """One program run: a process per rank, output in files (ranks share no pipe to fill)."""

    def __init__(self, fault: str, cases: list[str], folder: str) -> None:
        self.fault = fault
        self.cases = cases
        world_size = 2 if fault == "late" else 1 + len(cases)
        name = os.path.join(folder, f"{fault}-{cases[0]}")
        self.outputs = [f"{name}-{rank}.txt" for rank in range(world_size)]
        self.procs = []
        for rank, path in enumerate(self.outputs):
            with open(path, "w") as out:
                # every CPU: a mask the test process was left with must not slow the ranks' start-up
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, PROGRAM, fault, f"{name}-store", str(rank), *cases],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        preexec_fn=lambda: os.sched_setaffinity(0, range(os.cpu_count())),
                    )
                )

    def finish(self) -> dict[tuple[str, str], tuple[str | None, str]]:
        """{(fault, case): (what rank 0 reported, every rank's output)}."""
        for proc in self.procs:
            try:
                proc.wait(timeout=RUN_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        text = "".join(f"--- rank {rank}:\n{open(path).read()}" for rank, path in enumerate(self.outputs))
        results = dict(re.findall(r"^RESULT (\S+) (.*)$", text, re.MULTILINE))
        return {(self.fault, case): (results.get(case), text) for case in self.cases}


@pytest.fixture(scope="module")
def outcomes() -> dict[tuple[str, str], tuple[str | None, str]]:
    found = {}
    with tempfile.TemporaryDirectory(prefix="fastcomm-comm-failures-") as folder:
        late = [_Run("late", cases, folder) for cases in RUNS["late"]]
        for cases in RUNS["kill"]:
            found.update(_Run("kill", cases, folder).finish())
        for run in late:
            found.update(run.finish())
    return found


@pytest.mark.parametrize("fault", ["late", "kill"])
@pytest.mark.parametrize("case", CASES)
def test_failed_collective_raises(outcomes, case, fault):
    """The step raised the failed collective's own error: not returned (the
    bucket or model left unaveraged), and not a later collective's error on
    the group that the first failure broke ("... failed earlier: ...")."""
    report, text = outcomes[(fault, case)]
    assert report is not None, text
    assert report.startswith("raised "), report
    assert re.search(ERRORS[fault], report), report
    assert "failed earlier" not in report, report
