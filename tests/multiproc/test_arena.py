"""The shared-memory arena (checks_arena.py)."""

import checks_arena as checks
import pytest


@pytest.mark.parametrize("topology", ["ws2", "ws3", "ws4"])
def test_all_reduce_in_place(pool_of, topology):
    pool_of(topology).run(checks.all_reduce_in_place)


@pytest.mark.parametrize("topology", ["ws2", "ws3", "ws4"])
def test_gather_and_scatter_in_place(pool_of, topology):
    pool_of(topology).run(checks.gather_and_scatter_in_place)


@pytest.mark.parametrize(
    "check",
    [
        checks.ddp_buckets_in_arena,
        checks.fsdp2_buffers_in_arena,
        checks.memory_returned_with_group,
        checks.arena_on_some_ranks_only,
    ],
    ids=lambda c: c.__name__,
)
def test_arena(pool_of, check):
    pool_of("ws3").run(check)


@pytest.mark.parametrize("topology", ["ws4-2hosts", "ws3-noshm"])
def test_no_arena_off_one_host(pool_of, topology):
    pool_of(topology).run(checks.no_arena_off_one_host)
