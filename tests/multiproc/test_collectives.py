"""Every collective on the fastcomm backend on every test topology (tests/conftest.py), exact references."""
import checks_collectives as checks
import pytest

CHECKS = [
    checks.all_reduce,
    checks.all_reduce_layouts,
    checks.all_reduce_async,
    checks.all_reduce_through_the_backend_object,
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


@pytest.mark.parametrize("check", [checks.all_reduce, checks.all_reduce_layouts, checks.algorithm_paths], ids=lambda c: c.__name__)
def test_all_reduce_without_allgather_path(ranks_no_allgather, check):
    """FASTCOMM_ALLREDUCE_ALLGATHER_MAX_BYTES=0: every all_reduce goes to Gloo's own algorithm."""
    ranks_no_allgather.run(check)
