"""benchmarks/peers/rounds.py: how many samples a round of equal time takes."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "peers"))
from rounds import more_samples  # noqa: E402


def test_equal_count_takes_no_more():
    assert more_samples(30, 0.0, 1000, 0.001) == 0


def test_equal_time_fills_the_round_up_to_the_cap():
    assert more_samples(30, 100.0, 200000, 0.003) == 970  # 30 in 3 ms: 1000 in 100 ms
    assert more_samples(30, 100.0, 200000, 0.0031) == 938  # ceil(967.7) - 30
    assert more_samples(30, 100.0, 500, 0.003) == 470  # at most max_samples in all
    assert more_samples(30, 100.0, 200000, 0.25) == 0  # the first 30 already took longer
    assert more_samples(30, 100.0, 20, 0.001) == 0  # a cap under --iters takes nothing more
