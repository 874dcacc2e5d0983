"""benchmarks/peers helpers: how many samples a round of equal time takes (rounds.py), and
run.py's jobs without address-space randomization."""

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "peers"))
import run  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from rounds import more_samples, take_round  # noqa: E402


def test_equal_count_takes_no_more():
    assert more_samples(30, 0.0, 1000, 0.001) == 0


def test_equal_time_fills_the_round_up_to_the_cap():
    assert more_samples(30, 100.0, 200000, 0.003) == 970  # 30 in 3 ms: 1000 in 100 ms
    assert more_samples(30, 100.0, 200000, 0.0031) == 938  # ceil(967.7) - 30
    assert more_samples(30, 100.0, 500, 0.003) == 470  # at most max_samples in all
    assert more_samples(30, 100.0, 200000, 0.25) == 0  # the first 30 already took longer
    assert more_samples(30, 100.0, 20, 0.001) == 0  # a cap under --iters takes nothing more


def test_take_round_takes_rank_zeros_count_on_every_rank():
    """Only rank 0's count goes to the agreement; a rank takes --iters, then what was agreed."""
    taken, offered = [], []

    def take(k):
        taken.append(k)
        return [0.001] * k

    def agree(n):
        offered.append(n)
        return 7

    args = SimpleNamespace(iters=3, round_ms=40.0, max_samples=1000)
    assert take_round(take, agree, 1, args) == [0.001] * 10 and taken == [3, 7] and offered == [0]
    taken.clear()
    assert take_round(take, agree, 0, SimpleNamespace(iters=3, round_ms=0.0, max_samples=1000)) == [0.001] * 3
    assert taken == [3] and offered == [0]  # equal count: no agreement, nothing more


def test_fixed_layout_turns_randomization_off_in_the_job_and_its_children():
    """The flag is set before exec and survives it, in a grandchild too (ranks under mpiexec)."""

    def flags(preexec_fn):
        out = subprocess.run(
            ["sh", "-c", "cat /proc/self/personality"],
            capture_output=True,
            text=True,
            preexec_fn=preexec_fn,
            check=True,
        )
        return int(out.stdout, 16)

    assert not flags(None) & run.ADDR_NO_RANDOMIZE
    assert flags(run._fixed_layout) & run.ADDR_NO_RANDOMIZE


def test_round_to_round_spread_as_a_ratio_and_in_time():
    """Round medians 2 and 5 s (rounds of 2 and 3 samples, in the order taken)."""
    seconds = [1.0, 3.0, 5.0, 5.0, 6.0]
    assert run._round_medians(seconds, [2, 3]) == [2.0, 5.0]
    assert run._round_to_round(seconds, [2, 3]) == 2.5
    assert run._round_to_round_time(seconds, [2, 3]) == 3.0


def test_spread_table_names_the_steadiest_peer_by_each_measure(capsys):
    """fastcomm's rounds 2 and 5 us (2.5x, 3 us); gloo's 10 and 20 (2x, 10 us); mpich's 100 and 300
    (3x, 200 us): gloo is steadier by the ratio, fastcomm by time."""
    us = lambda *v: [1e-6 * x for x in v]  # noqa: E731
    samples = {"fastcomm": {8: us(2, 5)}, "gloo": {8: us(10, 20)}, "mpich": {8: us(100, 300)}}
    lengths = {lib: {8: [1, 1]} for lib in samples}
    run._spread_table(samples, lengths, ["fastcomm", "gloo", "mpich"], [8])
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].split() == ["8", "2.50", "2/3", "gloo", "2.00", "<=", "3.0", "1/3", "gloo", "10.0"]
    assert lines[-1] == "# fastcomm's mean place: 2.00 by ratio, 1.00 in time (a library like the others: 2.0)"


def test_place_counts_the_strictly_steadier():
    assert run._place({"fastcomm": 1.1, "a": 1.0, "b": 1.1, "c": 1.3}) == 2
    assert run._place({"fastcomm": 0.9, "a": 1.0}) == 1
