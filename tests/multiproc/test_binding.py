"""FASTCOMM_SHM_BIND_CPUS (checks_binding.py)."""
import checks_binding as checks


def test_ranks_bound_by_local_rank(pool_of):
    for world_size in (2, 3):  # 3: more ranks than this machine's 2 CPUs, two share one
        pool_of(world_size, (("FASTCOMM_SHM_BIND_CPUS", "1"),)).run(checks.bound_by_local_rank)
