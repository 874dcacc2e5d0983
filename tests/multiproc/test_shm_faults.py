"""Faults of the shared-memory engine, each in fresh processes (programs/shm_faults.py)."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

PROGRAMS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "programs")


def _run(scenario: str, world_size: int, tmp_path, shm_lines: int = 1) -> tuple[str, dict[int, list[str]]]:
    out = subprocess.run(
        [sys.executable, os.path.join(PROGRAMS, "shm_faults.py"), scenario, str(tmp_path / "store"), str(world_size)],
        capture_output=True,
        text=True,
        timeout=150,
    )
    text = out.stdout + out.stderr
    results: dict[int, list[str]] = {}
    for rank, rest in re.findall(r"RESULT (\d+) (.*)", out.stdout):
        results.setdefault(int(rank), []).append(rest)
    # Nothing in /dev/shm: not after setup (checked on every rank), not at the end, even after a SIGKILL.
    assert re.findall(r"SHM \d+ (\d+)", out.stdout) == ["0"] * world_size * shm_lines, text
    assert "FINAL 0" in out.stdout, text
    return text, results


def _seconds_and_error(line: str) -> tuple[float, str]:
    seconds, error = line.split(" ", 1)
    return float(seconds), error


def test_dead_peer_fails_every_live_rank_quickly(tmp_path):
    text, results = _run("dead_peer", 3, tmp_path)
    assert sorted(results) == [0, 1], text
    for rank in (0, 1):
        seconds, error = _seconds_and_error(results[rank][0])
        assert error.startswith("DistBackendError: fastcomm all_reduce:"), text
        # The first rank to notice names the dead pid; one that is woken by that
        # rank's failure flag first may name the rank that gave up instead.
        assert re.search(
            r"rank 2 \(pid \d+\) on this host exited while rank %d waited for it|rank\(s\) 2 had not arrived" % rank,
            error,
        ), text
        assert seconds < 10.0, text  # the group timeout; pid checks run every 0.1 s


def test_dead_peer_in_single_copy_all_reduce(tmp_path):
    """A peer SIGKILLed while ranks read and write each other's tensors
    (allreduce_shm_single_copy): the live rank names it, within the group
    timeout, nothing left in /dev/shm. (Here the live rank mostly notices in a
    wait; a read of the dead rank's tensor says "read its tensor", a write
    "wrote its tensor".)"""
    text, results = _run("dead_peer_single_copy", 2, tmp_path)
    assert sorted(results) == [0], text
    seconds, error = _seconds_and_error(results[0][0])
    assert error.startswith("DistBackendError: fastcomm all_reduce:"), text
    assert re.search(
        r"rank 1 \(pid \d+\) on this host exited while rank 0 (waited for it|read its tensor|wrote its tensor)", error
    ), text
    assert seconds < 10.0, text


def test_silent_peer_fails_every_live_rank_within_timeout(tmp_path):
    """The first rank to reach its deadline says it timed out; the others quote
    it (cause and missing rank), whichever rank that was."""
    text, results = _run("silent_peer", 3, tmp_path)
    assert sorted(results) == [0, 1], text
    for rank in (0, 1):
        seconds, error = _seconds_and_error(results[rank][0])
        assert error.startswith("DistBackendError: fastcomm all_reduce:"), text
        assert re.search(
            r"^DistBackendError: fastcomm all_reduce: timed out after 3000 ms waiting for rank\(s\) 2 |"
            r"stopped waiting: rank [01] gave up on a collective: timed out after 3000 ms waiting for "
            r"rank\(s\) 2 ",
            error,
        ), text
        assert 2.5 < seconds < 6.0, text


def test_peer_that_leaves_the_group_fails_the_others_at_once(tmp_path):
    """The last rank destroys its group while the others wait in an all_reduce:
    they stop within a fraction of the group timeout (10 s), naming it."""
    text, results = _run("left_peer", 3, tmp_path)
    assert sorted(results) == [0, 1], text
    for rank in (0, 1):
        seconds, error = _seconds_and_error(results[rank][0])
        assert re.search(
            r"DistBackendError: fastcomm all_reduce: rank 2 left the group \(shutdown, abort or "
            r"destroy_process_group\) while rank %d waited for it" % rank,
            error,
        ), text
        assert seconds < 3.0, text


@pytest.mark.parametrize("world_size", [2, 3])
def test_mismatched_calls_fail_on_every_rank_and_group_survives(tmp_path, world_size):
    text, results = _run("mismatch", world_size, tmp_path)
    assert sorted(results) == list(range(world_size)), text
    expected = [
        r"RuntimeError: fastcomm all_reduce: ranks disagree on the collective: .*input (16|20|24) B",
        r"RuntimeError: fastcomm all_reduce: ranks disagree on the collective: .*(MAX|SUM).*(MAX|SUM)",
        r"RuntimeError: fastcomm broadcast: ranks disagree on the collective: .*root \d.*root \d",
        r"RuntimeError: fastcomm (all_reduce|broadcast): ranks disagree on the collective: .*ALLREDUCE.*BROADCAST|"
        r"RuntimeError: fastcomm (all_reduce|broadcast): ranks disagree on the collective: .*BROADCAST.*ALLREDUCE",
        r"RuntimeError: fastcomm all_to_all_single: rank 1 sends 4 bytes to rank 0, which expects 8 bytes",
        r"RuntimeError: fastcomm all_reduce: ranks disagree on the collective: .*input (16|20|24) B",
        r"RuntimeError: fastcomm all_reduce: ranks disagree on the collective: .*input (16|20|24) B.*SUM",
    ]
    for rank in range(world_size):
        assert len(results[rank]) == len(expected), text
        for line, pattern in zip(results[rank], expected):
            seconds, error = _seconds_and_error(line)
            assert re.search(pattern, error), (pattern, error)
            assert seconds < 5.0, text
        assert f"AFTER {rank} group works" in text, text


def test_mismatch_across_hosts_fails_every_rank(tmp_path):
    """Two simulated hosts pass different sizes, then call different
    collectives: every rank, leader or not, raises an error saying so."""
    text, results = _run("mismatch_hosts", 4, tmp_path, shm_lines=2)
    assert sorted(results) == [0, 1, 2, 3], text
    expected = [
        r"ALLREDUCE of Float \(input (16|20) B.*ALLREDUCE of Float \(input (16|20) B",
        r"(_ALLGATHER_BASE|_REDUCE_SCATTER_BASE) of Float.*(_ALLGATHER_BASE|_REDUCE_SCATTER_BASE) of Float",
    ]
    for rank in range(4):
        assert len(results[rank]) == len(expected), text
        for line, pattern in zip(results[rank], expected):
            seconds, error = _seconds_and_error(line)
            assert "ranks disagree on the collective across hosts" in error, text
            assert re.search(pattern, error), (pattern, error)
            assert seconds < 5.0, text


def test_dead_rank_on_another_host_is_named_everywhere(tmp_path):
    """Rank 3 (second rank of host 1) dies: its host notices at once; host 0's
    ranks fail when their leader's network step times out, quoting what host 1
    posted."""
    text, results = _run("dead_other_host", 4, tmp_path)
    assert sorted(results) == [0, 1, 2], text
    for rank in (0, 1, 2):
        seconds, error = _seconds_and_error(results[rank][0])
        assert error.startswith("DistBackendError: fastcomm all_reduce:"), text
        assert re.search(r"rank 3 \(pid \d+\) on this host exited while rank 2 waited for it", error), text
        assert seconds < 5.0 + 3.0, text
    assert re.search(r"host 1 reported: .*rank 3 \(pid \d+\) on this host exited", results[0][0]), text


SETUP_STEPS = [
    "after_host_keys",
    "after_create",
    "before_attach",
    "after_attach",
    "during_statuses",
    "during_leaders",
    "after_setup",
]


@pytest.mark.parametrize("step", SETUP_STEPS)
def test_creator_killed_at_any_setup_step_leaves_nothing(step, tmp_path):
    """programs/setup_kills.py: the segment's creator (rank 0 of 3) is SIGKILLed at
    `step` of the rendezvous. Both survivors fail with an error (no hang) within the
    group timeout (4 s) plus start-up slack, and /dev/shm holds nothing new, while
    they run or after everyone has ended (segments are memfds)."""
    out = subprocess.run(
        [sys.executable, os.path.join(PROGRAMS, "setup_kills.py"), step, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=150,
    )
    text = out.stdout + out.stderr
    assert "HUNG" not in out.stdout, text
    results = dict(re.findall(r"RESULT (\d+) (.*)", out.stdout))
    assert sorted(results) == ["1", "2"], text
    for rank, line in results.items():
        assert line != "ok", text
        seconds, error = _seconds_and_error(line)
        assert seconds < 4.0 + 6.0, text
        assert re.search(r"rank\(?s?\)? \[?0\b|closed by peer|Connection reset|died or is unreachable", error), text
    before = re.search(r"SHM_BEFORE (\d+)", out.stdout).group(1)
    assert re.findall(r"SHM [12] (\d+)", out.stdout) == [before, before], text
    assert re.search(r"SHM_AFTER (\d+)", out.stdout).group(1) == before, text


@pytest.mark.parametrize(
    "scenario, pattern, limit",
    [
        ("p2p_dead_peer", r"fastcomm recv: rank 1 \(pid \d+\) on this host exited with messages pending", 5.0),
        ("p2p_left_peer", r"fastcomm recv: rank 1 left the group \(shutdown, abort or destroy_process_group\)", 5.0),
        (
            "p2p_silent_peer",
            r"fastcomm recv: rank 0's recv of 262144 B \(tag 0\) from rank 1 timed out after 3000 ms "
            r"with 0 of 262144 B moved",
            6.0,
        ),
    ],
)
def test_p2p_missing_peer(tmp_path, scenario, pattern, limit):
    """A receive from a dead, departed or silent peer on the shared-memory
    channels fails naming it: dead and departed within a second or so (the
    group timeout is 10 s), silent at the group timeout (3 s)."""
    text, results = _run(scenario, 2, tmp_path)
    assert sorted(results) == [0], text
    seconds, error = _seconds_and_error(results[0][0])
    assert error.startswith("DistBackendError: "), text
    assert re.search(pattern, error), text
    assert seconds < limit, text
    if scenario == "p2p_silent_peer":
        assert seconds >= 2.9, text


def test_p2p_size_mismatch_fails_both_sides(tmp_path):
    """Sizes that differ fail the receive (RuntimeError) and the send: at once
    while it is in flight, else the sender's next message to that rank; the
    group's collectives keep working."""
    text, results = _run("p2p_mismatch", 3, tmp_path)
    differ = r"rank %d's recv of %d B \(tag 0\) from rank %d matched a message of %d B from rank %d: the sizes differ"
    big = differ % (1, 2 << 20, 0, 3 << 20, 0)
    small = differ % (2, 48, 1, 40, 1)
    seconds, error = _seconds_and_error(results[0][0])
    assert error.startswith("DistBackendError: fastcomm send: the receiver refused a message: ") and re.search(
        big, error
    ), text
    assert seconds < 5.0, text
    errors_1 = [_seconds_and_error(line)[1] for line in results[1]]
    assert len(errors_1) == 2 and re.search("RuntimeError: fastcomm recv: " + big, errors_1[0]), text
    assert re.search("DistBackendError: fastcomm send: the receiver refused a message: " + small, errors_1[1]), text
    errors_2 = [_seconds_and_error(line)[1] for line in results[2]]
    assert len(errors_2) == 1 and re.search("RuntimeError: fastcomm recv: " + small, errors_2[0]), text
    assert text.count("group works") == 3, text


def test_single_copy_refused_falls_back(tmp_path):
    """A receiver that may not read its sender's memory gets every message
    through the ring instead (exact), and the other direction keeps single copy;
    all_reduce goes to two-shot on both ranks (exact), the low-precision one to
    the segment path; a group that read its
    peer in one copy before fails an all_reduce in which the refused rank reads
    on both ranks, naming the refused read (work sharing may let the permitted
    rank do a whole op alone first: that op is exact, the program tries up to 5)."""
    store_dir = tempfile.mkdtemp(prefix="fastcomm-p2p-")  # not under pytest's 0700 folders: nobody writes here
    try:
        out = subprocess.run(
            [sys.executable, os.path.join(PROGRAMS, "single_copy_refused.py"), store_dir],
            capture_output=True,
            text=True,
            timeout=150,
            cwd=tmp_path,
        )
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "OK 0" in out.stdout and "OK 1" in out.stdout, text
    stats = {int(r): json.loads(s) for r, s in re.findall(r"RESULT (\d) (.*)", out.stdout)}
    assert stats[0]["sent"] == 3 and stats[0]["sent_single_copy"] == 0, stats  # rank 1 could not read rank 0
    assert stats[1]["single_copy_refused"] == 1, stats  # refused once; later messages went through the ring
    assert stats[1]["sent"] == 3 and stats[1]["sent_single_copy"] == 3, stats  # rank 0 reads rank 1 in one copy
    counts = {int(r): json.loads(s) for r, s in re.findall(r"ALLREDUCE (\d) (.*)", out.stdout)}
    for rank in (0, 1):  # the first found the refusal (two-shot's steps inside), the second went to two-shot
        assert counts[rank]["allreduce_shm_single_copy"] == 1 and counts[rank]["allreduce_shm_twoshot"] == 1, counts
        assert counts[rank]["allreduce_low_precision_shm_single_copy"] == 1, counts  # the segment's steps inside
        assert counts[rank]["allreduce_low_precision_shm"] == 1, counts
    tries = {int(r): (int(n), e) for r, n, e in re.findall(r"REFUSED_LATER (\d) (\d) (.*)", out.stdout)}
    assert tries[0][0] == tries[1][0], tries  # both ranks saw the same op fail
    later = {str(r): e for r, (_, e) in tries.items()}
    assert re.search(
        r"DistBackendError: .*cannot read rank 0's tensor \(process_vm_readv: Operation not permitted\)", later["1"]
    ), later
    assert later["0"].startswith("DistBackendError: ") and "rank 1" in later["0"], later
    threads = re.findall(r"THREADS (\d) (\d+) (\d+)", out.stdout)
    assert len(threads) == 2 and all(before == after for _, before, after in threads), text  # no thread left
