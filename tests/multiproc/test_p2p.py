"""send/recv on every test topology (tests/conftest.py): shared-memory channels on one host, Gloo otherwise;
and on one host with single copy off (every message through the channels' rings)."""

import checks_p2p as checks
import pytest

CHECKS = [
    checks.sizes_and_dtypes,
    checks.large_isends_before_receives,
    checks.tags_in_any_order,
    checks.any_source,
    checks.futures_without_wait,
    checks.path,
    checks.subgroup_and_wait_timeout,
    checks.batched_and_coalesced,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_p2p(topology_ranks, check):
    topology_ranks.run(check)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_p2p_ring_only(pool_of, check):
    pool_of(3, (("FASTCOMM_P2P_SINGLE_COPY_BYTES", "0"),)).run(check)


def test_single_copy_path(ranks2):
    ranks2.run(checks.single_copy_counts)


@pytest.mark.parametrize("any_source", [False, True], ids=["named_source", "any_source"])
def test_pingpong_on_one_cpu(ranks2, any_source):
    ranks2.run(checks.pingpong_on_one_cpu, any_source=any_source)


def test_reused_sends_move_into_huge_pages(ranks2):
    ranks2.run(checks.reused_sends_move_into_huge_pages)
