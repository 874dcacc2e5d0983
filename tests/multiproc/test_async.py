"""Large all_reduce on the engine's op queue (checks_async.py)."""

import checks_async as checks
import pytest


@pytest.mark.parametrize(
    "check",
    [
        checks.launch_returns_before_peers_arrive,
        checks.blocking_calls_run_on_the_caller,
        checks.issue_order_holds,
        checks.queue_thread_ends_with_group,
        checks.ddp_on_the_queue,
    ],
    ids=lambda c: c.__name__,
)
def test_op_queue(pool_of, check):
    # The queue on (its automatic default is off on hosts with fewer than two cores per rank).
    for world_size in (2, 3):
        pool_of(world_size, (("FASTCOMM_SHM_ASYNC_MIN_BYTES", str(1 << 20)),)).run(check)
