"""A hook given a state that is not its own fails with a clear TypeError (checks_hook_states.py)."""

import checks_hook_states as checks


def test_wrong_state_is_named(ranks2):
    ranks2.run(checks.wrong_state_is_named)


def test_wrong_state_refused_at_registration(ranks2):
    ranks2.run(checks.wrong_state_refused_at_registration)
