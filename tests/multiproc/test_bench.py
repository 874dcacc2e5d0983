"""fastcomm-bench's collective specs and #wrong detection across ranks."""

import checks_bench as checks


def test_bench_specs_clean(ranks):
    ranks.run(checks.every_collective_clean, timeout=300)


def test_bench_corruption_caught(ranks):
    ranks.run(checks.corruption_on_one_rank_is_caught)
