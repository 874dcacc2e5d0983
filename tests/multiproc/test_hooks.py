"""fastcomm.hooks on 2 and 3 ranks (fastcomm and gloo groups)."""

import checks_hooks as checks
import pytest

from fastcomm.hooks import HOOK_NAMES

LOSSY_GATHER = [
    ("int8", {}),
    ("int8", {"block_size": 7, "error_feedback": False}),
    ("topk", {"ratio": 0.1}),
    ("topk", {"ratio": 1.0}),
    ("sign", {}),
    ("sign", {"error_feedback": False}),
]


@pytest.mark.parametrize("backend", ["fastcomm", "gloo"])
@pytest.mark.parametrize("name, options", LOSSY_GATHER, ids=lambda v: str(v))
def test_gather_hooks_match_reference(ranks, backend, name, options):
    ranks.run(checks.gather_hook_matches_reference, name=name, backend=backend, options=options)


@pytest.mark.parametrize("backend", ["fastcomm", "gloo"])
def test_lossless_and_low_precision_hooks(ranks, backend):
    ranks.run(checks.lowprec_hooks_match_mean, backend=backend)


def test_fp16_clamps_and_passes_inf(ranks):
    ranks.run(checks.fp16_clamps_instead_of_overflowing)


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_stats(ranks2, name):
    ranks2.run(checks.stats_count_what_was_sent, name=name)


@pytest.mark.parametrize(
    "name, options",
    [("int8", {}), ("topk", {"ratio": 0.05}), ("sign", {}), ("powersgd", {"matrix_approximation_rank": 1})],
    ids=lambda v: str(v),
)
def test_error_feedback_invariant(ranks, name, options):
    ranks.run(checks.error_feedback_invariant, name=name, options=options)


def test_powersgd_rank(ranks2):
    ranks2.run(checks.powersgd_low_rank_and_exact_on_rank1)


@pytest.mark.parametrize("option", ["no_sync", "static_graph", "gradient_as_bucket_view"])
@pytest.mark.parametrize("name", HOOK_NAMES)
def test_ddp_options(ranks2, name, option):
    ranks2.run(checks.ddp_options, name=name, option=option)


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_mixed_dtypes(ranks2, name):
    ranks2.run(checks.mixed_dtypes, name=name)


@pytest.mark.parametrize("name", HOOK_NAMES)
def test_checkpoint(ranks2, name):
    ranks2.run(checks.checkpoint_restores_state, name=name)


def test_bad_options(ranks2):
    ranks2.run(checks.bad_options_register_nothing)


@pytest.mark.parametrize("optimizer, backend", [("sgd", "fastcomm"), ("momentum", "fastcomm"), ("sgd", "gloo")])
def test_convergence(ranks2, optimizer, backend):
    ranks2.run(checks.convergence, timeout=300, optimizer=optimizer, backend=backend)


def test_comm_buffers_in_arena(ranks2):
    ranks2.run(checks.comm_buffers_in_arena)
