"""The rank pool: a check that fails on one rank ends its pool, so the next
test starts on a group whose ranks are in step (harness.py)."""

import pytest

import checks_harness as checks
from harness import RankPool


def test_a_failed_check_ends_the_pool():
    pool = RankPool(2)
    try:
        assert pool.run(checks.sums) == [[3.0, 3.0], [3.0, 3.0]]
        with pytest.raises(
            AssertionError, match=r"(?s)fails_on failed on ranks \[1\]:\n--- rank 1:\n.*ValueError: rank 1 stops early"
        ):
            pool.run(checks.fails_on, failing=1)
        assert pool.broken
        assert not any(p.is_alive() for p in pool._procs)
        with pytest.raises(AssertionError, match="pool is broken"):
            pool.run(checks.sums)
    finally:
        pool.close(kill=True)
