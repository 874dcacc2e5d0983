"""The low-precision all_reduce (fp16/bf16 hooks' path on fastcomm groups) on every test topology."""
import checks_low_precision as checks


def test_matches_definition(topology_ranks):
    topology_ranks.run(checks.matches_definition)


def test_bad_arguments(ranks2):
    ranks2.run(checks.bad_arguments)


def test_hooks_use_it(pool_of):
    for topology in ("ws3", "ws4-2hosts"):
        pool_of(topology).run(checks.hooks_use_it)
