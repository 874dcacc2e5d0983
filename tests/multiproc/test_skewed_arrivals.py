"""Ranks that arrive apart by up to 3 ms stay exact (checks_skew.py): 2 ranks
with a CPU each, and 3 ranks on this machine's 2 CPUs (waiters yield and
sleep there)."""

import pytest

import checks_skew as checks


@pytest.mark.parametrize("world_size", [2, 3])
def test_skewed_collectives_exact(pool_of, world_size):
    pool_of(world_size).run(checks.skewed_collectives_exact, iterations=24, widths_us=[50, 400, 3000])


@pytest.mark.parametrize("world_size", [2, 3])
def test_skewed_p2p_exact(pool_of, world_size):
    pool_of(world_size).run(checks.skewed_p2p_exact, iterations=30, width_us=500)


@pytest.mark.parametrize("world_size", [2, 3])
def test_waits_without_spin_budget_sleep(pool_of, world_size):
    # Bound: at 2 ranks each keeps its own CPU, so a waiter never finds the late rank on its CPU
    # (it would yield to it instead of sleeping, which the check counts).
    pool_of(world_size, (("FASTCOMM_SHM_BIND_CPUS", "1"),)).run(checks.waits_without_spin_budget_sleep, iterations=20)
