"""The low-precision all_reduce (fp16/bf16 hooks' path on fastcomm groups) on every test topology."""

import checks_low_precision as checks
import pytest
from harness import single_copy_env


def test_matches_definition(topology_ranks):
    topology_ranks.run(checks.matches_definition)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_single_copy_matches_definition(pool_of, world_size):
    """Single copy from 256 KiB on 2, 3 and 4 ranks (by default it starts at
    32 KiB where ranks have a CPU each, and is off where they outnumber CPUs)."""
    pool_of(world_size, single_copy_env(world_size)).run(checks.matches_definition)


def test_bad_arguments(ranks2):
    ranks2.run(checks.bad_arguments)


def test_hooks_use_it(pool_of):
    for topology in ("ws3", "ws4-2hosts"):
        pool_of(topology).run(checks.hooks_use_it)


@pytest.mark.parametrize("topology", ["ws2", "ws3", "ws4"])
def test_on_arena_tensors(pool_of, topology):
    """In place from the default 4 KiB, through the segment below."""
    pool_of(topology).run(checks.on_arena_tensors)


def test_on_arena_tensors_queued(pool_of):
    """2 ranks, from 64 KiB on the op queue."""
    pool_of(2, single_copy_env(2)).run(checks.on_arena_tensors)


@pytest.mark.parametrize(
    "check", [checks.hooks_on_arena_buckets, checks.arena_on_some_ranks_only], ids=lambda c: c.__name__
)
def test_arena_buckets(pool_of, check):
    pool_of("ws3").run(check)
