"""DDP, FSDP2, torch.compile and debug-mode checks on the fastcomm backend."""

import checks_training as checks
import pytest


@pytest.mark.parametrize(
    "check",
    [checks.ddp_parity, checks.ddp_no_sync, checks.ddp_find_unused, checks.ddp_torch_hooks, checks.fsdp2],
    ids=lambda c: c.__name__,
)
def test_training(topology_ranks, check):
    topology_ranks.run(check)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_functional_collectives(ranks2, backend):
    ranks2.run(checks.compiled_functional_collectives, timeout=400, backend=backend)


def test_debug_detail(ranks_detail):
    ranks_detail.run(checks.debug_detail)
