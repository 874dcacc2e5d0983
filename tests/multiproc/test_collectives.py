"""Every collective on the fastcomm backend on every test topology (tests/conftest.py), exact references."""

import checks_collectives as checks
import pytest
from harness import single_copy_env

CHECKS = [
    checks.all_reduce,
    checks.all_reduce_layouts,
    checks.all_reduce_async,
    checks.all_reduce_through_the_backend_object,
    checks.large_all_reduce_single_copy,
    checks.reused_tensors_move_into_huge_pages,
    checks.broadcast,
    checks.reduce,
    checks.all_gather,
    checks.reduce_scatter,
    checks.large_gather_and_scatter,
    checks.large_rooted,
    checks.large_all_to_all,
    checks.all_to_all_single,
    checks.all_to_all,
    checks.gather_scatter,
    checks.point_to_point,
    checks.barrier_and_objects,
    checks.coalesced,
    checks.all_gather_coalesced_list_form,
    checks.monitored_barrier_and_sparse,
    checks.move_only_dtypes,
    checks.subgroups,
    checks.sequence_numbers,
    checks.algorithm_paths,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_collective(topology_ranks, check):
    topology_ranks.run(check)


@pytest.mark.parametrize(
    "check", [checks.all_reduce, checks.all_reduce_layouts, checks.algorithm_paths], ids=lambda c: c.__name__
)
def test_all_reduce_without_allgather_path(ranks_no_allgather, check):
    """FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES=0: every all_reduce goes to Gloo's own algorithm."""
    ranks_no_allgather.run(check)


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_single_copy_all_reduce(pool_of, world_size):
    """allreduce_shm_single_copy from 256 KiB (above one-shot) to 4 MiB; by default
    it is off where ranks outnumber CPUs, so ws3 and ws4 would not see it here.
    2 ranks run it on the op queue too."""
    pool_of(world_size, single_copy_env(world_size)).run(checks.large_all_reduce_single_copy)
