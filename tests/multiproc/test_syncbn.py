"""fastcomm.nn.SyncBatchNorm across ranks (world sizes 2 and 3) against
nn.BatchNorm*d on the concatenated global batch."""

import checks_syncbn as checks
import pytest

EVEN, UNEVEN, EMPTY_RANK = [4, 4, 4], [3, 5, 2], [3, 0, 4]

CASES = {
    "1d_NC": dict(batch_sizes=UNEVEN, feature_shape=(5,)),
    "1d_NCL": dict(batch_sizes=UNEVEN, feature_shape=(3, 7)),
    "2d": dict(batch_sizes=UNEVEN, feature_shape=(3, 5, 4)),
    "2d_even": dict(batch_sizes=EVEN, feature_shape=(4, 6, 6)),
    "2d_empty_rank": dict(batch_sizes=EMPTY_RANK, feature_shape=(3, 5, 4)),
    "2d_channels_last": dict(batch_sizes=UNEVEN, feature_shape=(6, 5, 4), channels_last=True),
    "2d_channels_last_empty_rank": dict(batch_sizes=EMPTY_RANK, feature_shape=(6, 5, 4), channels_last=True),
    "3d_channels_last": dict(batch_sizes=UNEVEN, feature_shape=(3, 3, 4, 5), channels_last=True),
    "3d": dict(batch_sizes=UNEVEN, feature_shape=(2, 3, 4, 5)),
    "2d_large_planes": dict(
        batch_sizes=[2, 3, 1], feature_shape=(2, 64, 70)
    ),  # crosses the kernels' fold and parallel thresholds
    "float64": dict(batch_sizes=UNEVEN, feature_shape=(3, 5, 4), dtype="float64"),
    "bfloat16": dict(batch_sizes=UNEVEN, feature_shape=(3, 5, 4), dtype="bfloat16"),
    "float16_channels_last": dict(batch_sizes=UNEVEN, feature_shape=(6, 5, 4), dtype="float16", channels_last=True),
    "momentum_none": dict(batch_sizes=UNEVEN, feature_shape=(3, 5, 4), momentum=None, steps=3),
    "no_affine": dict(batch_sizes=UNEVEN, feature_shape=(3, 5, 4), affine=False),
    "untracked": dict(batch_sizes=UNEVEN, feature_shape=(3, 5, 4), track_running_stats=False),
    "one_sample_per_rank": dict(batch_sizes=[1, 1, 1], feature_shape=(4,)),
}


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_batchnorm(ranks, case):
    ranks.run(checks.matches_batchnorm, **CASES[case])


def test_two_collectives_per_layer(ranks):
    ranks.run(checks.two_collectives_per_layer)


def test_ddp_training(ranks):
    ranks.run(checks.ddp_training)


def test_subgroups(ranks):
    ranks.run(checks.subgroups)


def test_bad_input(ranks):
    ranks.run(checks.bad_input)
