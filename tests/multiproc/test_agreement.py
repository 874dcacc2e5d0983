"""Ranks that differ in configuration: the group agrees on one plan or refuses
on every rank (fastcomm/_agreement.py); the engine compares the algorithm of
every op (programs/agreement.py, fresh processes per case)."""

import os
import re
import sys

import pytest

from harness import run_ranks

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")


def _run(scenario: str, envs: list[dict], tmp_path, timeout: float = 120) -> dict[int, str]:
    """Runs one rank per entry of `envs` (extra environment of that rank); each rank's RESULT line."""
    store = str(tmp_path / "store")
    program = os.path.join(PROGRAMS, "agreement.py")
    text = run_ranks(lambda rank: [sys.executable, program, scenario, str(rank), str(len(envs)), store], envs, timeout)
    results = {int(r): rest for r, rest in re.findall(r"^RESULT (\d+) (.*)$", text, re.MULTILINE)}
    assert sorted(results) == list(range(len(envs))), text
    return results


@pytest.mark.parametrize(
    "name, value, default",
    [
        ("FASTCOMM_SHM_ONESHOT_MAX_BYTES", "4096", "131072"),
        ("FASTCOMM_SHM_ALLREDUCE_SINGLE_COPY_MIN_BYTES", "1048576", "unset (automatic)"),
        ("FASTCOMM_SHM", "0", "True"),
    ],
)
def test_an_option_set_on_one_rank_refuses_the_group_on_every_rank(tmp_path, name, value, default):
    results = _run("option_differs", [{}, {name: value}], tmp_path)
    shown = "False" if name == "FASTCOMM_SHM" else repr(int(value))
    for rank, line in results.items():
        assert line.startswith("ValueError: fastcomm: set-up refused: ranks disagree"), (rank, line)
        assert f"{name}: group rank(s) [0] have {default}; group rank(s) [1] have {shown}" in line, (rank, line)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to bind one rank to fewer than its peer")
def test_a_rank_bound_to_fewer_cpus_plans_with_the_group(tmp_path):
    """Single copy's automatic minimum follows the CPUs: one rank bound to one
    CPU must not leave its peer running single copy against its two-shot."""
    results = _run("affinity_differs", [{}, {}], tmp_path)
    plans = set()
    for rank, line in results.items():
        assert line.startswith("ok "), (rank, line)
        plans.add(line)
    assert len(plans) == 1, results  # the same threshold and the same algorithms ran on both
    assert "single_copy_min=0" in plans.pop()  # 2 ranks, and the fewest CPUs any rank may use is 1


def test_ranks_that_choose_different_algorithms_raise_on_every_rank(tmp_path):
    results = _run("algorithm_differs", [{}, {"FASTCOMM_SHM_ONESHOT_MAX_BYTES": "1024"}], tmp_path)
    for rank, line in results.items():
        assert line.startswith("RuntimeError: fastcomm all_reduce: ranks disagree on the collective"), (rank, line)
        assert "by allreduce_shm_oneshot" in line and "by allreduce_shm_twoshot" in line, (rank, line)


def test_a_segment_larger_than_the_machine_is_refused(tmp_path):
    results = _run("slot_too_large", [{"FASTCOMM_SHM_SLOT_BYTES": str(1 << 40)}] * 2, tmp_path)
    for rank, line in results.items():
        assert line.startswith("ValueError: fastcomm: set-up refused: FASTCOMM_SHM_SLOT_BYTES=1099511627776"), line
        assert re.search(r"at most \d+ B per slot for 2 ranks on a host", line), line


def test_a_group_made_again_agrees_afresh(tmp_path):
    results = _run("made_again", [{"FASTCOMM_SHM": "0"}] * 2, tmp_path)
    for rank, line in results.items():
        assert line.startswith("RuntimeError: fastcomm "), (rank, line)
        assert "ranks disagree on the collective" in line, (rank, line)
        assert "by allreduce_via_allgather" in line and "by gloo_fallback" in line, (rank, line)
