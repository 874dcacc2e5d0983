"""Pipeline parallelism (torch.distributed.pipelining) on fastcomm, exact against the unsplit model."""

import checks_pipeline as checks
import pytest

# One host (shared-memory p2p) at 2, 3 and 4 ranks, and two simulated hosts (p2p on Gloo).
PIPELINE_TOPOLOGIES = ["ws2", "ws3", "ws4", "ws4-2hosts"]


@pytest.mark.parametrize("topology", PIPELINE_TOPOLOGIES)
@pytest.mark.parametrize("check", [checks.gpipe, checks.one_f_one_b, checks.interleaved_1f1b], ids=lambda c: c.__name__)
def test_pipeline_schedule(pool_of, topology, check):
    pool_of(topology).run(check)
