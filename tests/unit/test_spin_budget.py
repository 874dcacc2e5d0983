"""How long a wait on the caller's thread stays awake before it sleeps
(transport/shm/spin_budget.h), through fastcomm._C.spin_budgets: 1.5x the
longest recent wait, between the floor and the ceiling, and the floor while a
recent wait outlasted the ceiling."""

import pytest

from fastcomm import _C

FLOOR = _C.SPIN_BUDGET_FLOOR_US
CEILING = _C.SPIN_BUDGET_CEILING_US
RECENT = _C.SPIN_BUDGET_RECENT


def test_constants_are_ordered():
    assert 0 < FLOOR < CEILING and RECENT >= 2


def test_no_history_is_the_floor():
    assert _C.spin_budgets([]) == [FLOOR]


def test_short_waits_keep_the_floor():
    assert _C.spin_budgets([1.0, FLOOR / 2]) == [FLOOR, FLOOR, FLOOR]


def test_one_and_a_half_times_the_longest_recent_wait():
    waits = [400.0, 100.0, 600.0, 50.0]
    budgets = _C.spin_budgets(waits)
    assert budgets == pytest.approx([FLOOR, 600.0, 600.0, 900.0, 900.0], abs=1e-3)


def test_capped_at_the_ceiling():
    assert _C.spin_budgets([CEILING * 0.9])[-1] == CEILING


def test_a_wait_past_the_ceiling_drops_to_the_floor_until_it_ages_out():
    waits = [500.0, CEILING * 3] + [500.0] * RECENT
    budgets = _C.spin_budgets(waits)
    assert budgets[1] == pytest.approx(750.0, abs=1e-3)  # after the first wait
    # From the long wait on, for as long as it is among the recent ones: the floor.
    assert budgets[2 : 2 + RECENT] == [FLOOR] * RECENT
    assert budgets[-1] == pytest.approx(750.0, abs=1e-3)  # aged out
