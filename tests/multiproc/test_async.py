"""Large all_reduce on the engine's op queue (checks_async.py)."""
import checks_async as checks
import pytest


@pytest.mark.parametrize("check", [checks.launch_returns_before_peers_arrive, checks.issue_order_holds,
                                   checks.queue_thread_ends_with_group], ids=lambda c: c.__name__)
def test_op_queue(pool_of, check):
    for topology in ("ws2", "ws3"):
        pool_of(topology).run(check)
