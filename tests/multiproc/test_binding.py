"""FASTCOMM_SHM_BIND_CPUS (checks_binding.py)."""

import checks_binding as checks


def test_ranks_bound_by_local_rank(pool_of):
    for world_size in (2, 3):  # 3: more ranks than this machine's 2 CPUs, two share one
        pool_of(world_size, (("FASTCOMM_SHM_BIND_CPUS", "1"),)).run(checks.bound_by_local_rank)


def test_auto_never_binds(pool_of):
    for world_size in (2, 3):  # on this machine's 2 CPUs: one each, then more ranks than CPUs
        pool_of(world_size, (("FASTCOMM_SHM_BIND_CPUS", "auto"),)).run(checks.auto_never_binds)


def test_oversubscribed_ranks_return_home(pool_of):
    pool_of(3, (("FASTCOMM_SHM_BIND_CPUS", "auto"),)).run(checks.oversubscribed_ranks_return_home)


def test_forked_child_is_not_bound(pool_of):
    pool_of(2, (("FASTCOMM_SHM_BIND_CPUS", "1"),)).run(checks.forked_child_gets_the_cpus_back)


def test_large_ops_run_free(pool_of):
    pool_of(2, (("FASTCOMM_SHM_BIND_CPUS", "1"),)).run(checks.large_ops_run_free)


def test_preempted_peer_is_pulled(pool_of):
    pool_of(2, (("FASTCOMM_SHM_BIND_CPUS", "1"),)).run(checks.preempted_peer_is_pulled)


def test_preempted_peers_share_is_taken_over(pool_of):
    pool_of(2, (("FASTCOMM_SHM_BIND_CPUS", "1"),)).run(checks.preempted_peers_share_is_taken_over)
