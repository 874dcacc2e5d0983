"""Calls that differ between ranks on the Gloo paths, and aliasing, on the
group layouts the backend runs (conftest.TOPOLOGIES)."""

import pytest

import checks_aliasing
import checks_call_check

GLOO_PATHS = ["ws3-noshm", "ws2-1perhost"]
LAYOUTS = ["ws2", "ws3", "ws4-2hosts", "ws3-noshm", "ws2-1perhost"]


@pytest.mark.parametrize("topology", GLOO_PATHS)
def test_mismatched_calls_raise_on_every_rank(pool_of, topology):
    messages = pool_of(topology).run(checks_call_check.mismatched_calls)
    # Every rank names both calls of the first case.
    for per_rank in messages:
        assert "ALLREDUCE of Float" in per_rank[0] and "_ALLGATHER_BASE of Float" in per_rank[0], per_rank[0]


@pytest.mark.parametrize("topology", GLOO_PATHS)
def test_legitimate_calls_pass(pool_of, topology):
    pool_of(topology).run(checks_call_check.legitimate_calls_pass)


def test_gather_against_scatter_on_one_host(pool_of):
    messages = pool_of("ws2").run(checks_call_check.gather_against_scatter)
    assert all("GATHER" in m and "SCATTER" in m for m in messages), messages


@pytest.mark.parametrize("topology", LAYOUTS)
@pytest.mark.parametrize(
    "check",
    [checks_aliasing.in_place_forms, checks_aliasing.other_overlaps, checks_aliasing.overlapping_outputs_refused],
    ids=lambda f: f.__name__,
)
def test_aliasing(pool_of, topology, check):
    pool_of(topology).run(check)


@pytest.mark.parametrize("topology", GLOO_PATHS)
def test_unpaired_alltoall_splits_raise_on_every_rank(pool_of, topology):
    pool_of(topology).run(checks_call_check.unpaired_alltoall_splits)


@pytest.mark.parametrize("topology", LAYOUTS)
def test_paired_uneven_alltoall_passes(pool_of, topology):
    pool_of(topology).run(checks_call_check.paired_uneven_alltoall)


@pytest.mark.parametrize("topology", LAYOUTS)
def test_call_refused_on_one_rank_raises_on_every_rank(pool_of, topology):
    for per_rank in pool_of(topology).run(checks_call_check.refused_on_one_rank):
        assert len(per_rank) == 2 and all("disagree" in m for m in per_rank), per_rank
