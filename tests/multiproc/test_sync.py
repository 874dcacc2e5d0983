"""fastcomm.sync.ModelSync: full and incremental sync, compressed, asynchronous, checkpoints, DDP inside a host."""

import checks_sync as checks
import pytest


def test_full_sync_is_the_average(ranks):
    ranks.run(checks.full_sync_is_the_average)


def test_incremental_without_compression_matches_full(ranks):
    ranks.run(checks.incremental_without_compression_matches_full)


@pytest.mark.parametrize("compression", ["int8", "topk", "sign"])
def test_compressed_keeps_what_it_leaves_out(ranks, compression):
    ranks.run(checks.compressed_keeps_what_it_leaves_out, compression=compression)


@pytest.mark.parametrize("mode", ["full", "incremental"])
def test_async_applies_one_round_late(ranks, mode):
    ranks.run(checks.async_applies_one_round_late, mode=mode)


@pytest.mark.parametrize("async_op", [False, True], ids=["sync", "async"])
def test_checkpoint_resumes_exactly(ranks2, async_op):
    ranks2.run(checks.checkpoint_resumes_exactly, async_op=async_op)


@pytest.mark.parametrize("topology", ["ws4", "ws4-2hosts"])
def test_ddp_inside_hosts(pool_of, topology):
    pool_of(topology).run(checks.ddp_inside_hosts)


def test_bad_options(ranks2):
    ranks2.run(checks.bad_options)
