"""The low-precision all_reduce (fp16/bf16 hooks' path on fastcomm groups) on every test topology."""
import checks_low_precision as checks
import pytest


def test_matches_definition(topology_ranks):
    topology_ranks.run(checks.matches_definition)


def test_bad_arguments(ranks2):
    ranks2.run(checks.bad_arguments)


def test_hooks_use_it(pool_of):
    for topology in ("ws3", "ws4-2hosts"):
        pool_of(topology).run(checks.hooks_use_it)


IN_PLACE_FROM_ZERO = (("FASTCOMM_SHM_LOW_PRECISION_ARENA_MIN_BYTES", "0"),)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_on_arena_tensors(pool_of, world_size):
    """Every size in place (the option at 0; at 2 ranks from 64 KiB on the op
    queue), and at 2 ranks the default gate (in place from 16 KiB, through the
    segment below)."""
    queued = (("FASTCOMM_SHM_ASYNC_MIN_BYTES", "65536"),) if world_size == 2 else ()
    pool_of(world_size, IN_PLACE_FROM_ZERO + queued).run(checks.on_arena_tensors)
    if world_size == 2:
        pool_of("ws2").run(checks.on_arena_tensors)


@pytest.mark.parametrize("check", [checks.hooks_on_arena_buckets, checks.arena_on_some_ranks_only],
                         ids=lambda c: c.__name__)
def test_arena_buckets(pool_of, check):
    pool_of(3, IN_PLACE_FROM_ZERO).run(check)
