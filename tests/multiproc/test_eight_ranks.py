"""Eight ranks on one host (four per CPU here): every reduction reads eight
sources in one pass (kernels/cpu/reduce.cpp's reduce_direct, the low-precision
sum's fused loop; 2-4 ranks never reach those instances), checked exact against
the references through every path that reduces: one-shot, two-shot and
reduce_scatter through the segment, the arena read in place, the native
low-precision all_reduce through the segment and on arena tensors. The pool
is closed when this module ends (module_pool_of in tests/conftest.py)."""

import checks_arena
import checks_collectives
import checks_low_precision
import pytest

CHECKS = [
    checks_collectives.all_reduce,
    checks_collectives.reduce,
    checks_collectives.reduce_scatter,
    checks_collectives.algorithm_paths,
    checks_arena.all_reduce_in_place,
    checks_low_precision.matches_definition,
    checks_low_precision.on_arena_tensors,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_eight_ranks(module_pool_of, check):
    module_pool_of(8).run(check, timeout=300)
