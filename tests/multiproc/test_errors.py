"""Bad input is refused with a clear error and leaves the group usable."""

import checks_errors as checks


def test_bad_inputs(ranks):
    counts = ranks.run(checks.bad_inputs)
    assert counts[0] >= 25


def test_cuda_reason(ranks2):
    ranks2.run(checks.cuda_without_nccl)


def test_destroyed_subgroup_handle(ranks):
    ranks.run(checks.destroyed_subgroup_handle)
