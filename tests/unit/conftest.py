"""The `isa` fixture: runs a kernel test once per instruction-set level this
CPU supports (baseline always), with every CPU kernel family capped to that
level through fastcomm's one picker (csrc/kernels/cpu/isa.h). So the baseline
code of the reductions, conversions, int8, sign and PowerSGD kernels runs in
CI on any CPU, and the vector code wherever the CPU has it."""

import pytest

LEVELS = ("baseline", "avx2", "avx512")


def pytest_generate_tests(metafunc):
    if "isa" in metafunc.fixturenames:
        from fastcomm import _C

        supported = [name for name in LEVELS if _C.isa_supported(getattr(_C.Isa, name))]
        metafunc.parametrize("isa", supported, indirect=True)


@pytest.fixture
def isa(request):
    from fastcomm import _C

    level = getattr(_C.Isa, request.param)
    _C.set_isa_cap(level)
    assert _C.active_isa() == level
    try:
        yield level
    finally:
        _C.set_isa_cap(_C.Isa.avx512)  # no cap: the best level again
