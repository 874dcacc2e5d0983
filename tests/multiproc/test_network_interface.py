"""fastcomm's internal Gloo groups use the interfaces GLOO_SOCKET_IFNAME names
(as torch's gloo backend does): two simulated hosts of 2 ranks with the Gloo
fallback and the host leaders' group on loopback, by name."""

import checks_collectives as checks
import pytest


@pytest.mark.parametrize(
    "check",
    [checks.all_reduce, checks.broadcast, checks.gather_scatter, checks.algorithm_paths],
    ids=lambda c: c.__name__,
)
def test_collectives_over_named_interface(ranks_named_interface, check):
    ranks_named_interface.run(check)


def test_named_interface_reaches_the_ranks(ranks_named_interface):
    assert ranks_named_interface.run(checks.socket_ifname) == ["lo"] * 4
