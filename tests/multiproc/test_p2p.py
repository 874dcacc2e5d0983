"""send/recv on every test topology (tests/conftest.py): shared-memory channels on one host, Gloo otherwise."""
import checks_p2p as checks
import pytest

CHECKS = [
    checks.sizes_and_dtypes,
    checks.large_isends_before_receives,
    checks.tags_in_any_order,
    checks.any_source,
    checks.futures_without_wait,
    checks.path,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_p2p(topology_ranks, check):
    topology_ranks.run(check)
