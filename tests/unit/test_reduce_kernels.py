"""fastcomm's CPU reduction kernels (csrc/kernels/cpu/reduce.cpp) against a
sequential torch reference, bitwise, for every instruction set this CPU runs
(the baseline one always, so CI covers the scalar code on any machine: the
`isa` fixture in conftest.py caps the kernels' level)."""

import pytest
import torch

from fastcomm import _C

FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTEGERS = [torch.int8, torch.uint8, torch.int32, torch.int64]
# Awkward lengths: empty, one, around every vector width and unroll factor.
COUNTS = [0, 1, 7, 31, 33, 1023, 1025, 4099]

_TORCH_OP = {
    "sum": torch.add,
    "product": torch.mul,
    "min": torch.minimum,
    "max": torch.maximum,
    "band": torch.bitwise_and,
    "bor": torch.bitwise_or,
    "bxor": torch.bitwise_xor,
}


def _reference(sources, op):
    """((s0 op s1) op s2) ...: half types accumulate in float32 and round once."""
    dtype = sources[0].dtype
    wide = torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype
    acc = sources[0].to(wide)
    for s in sources[1:]:
        acc = _TORCH_OP[op](acc, s.to(wide))
    return acc.to(dtype)


def _sources(dtype, n, count, op, generator):
    if dtype.is_floating_point:
        # Products of many values stay finite: keep magnitudes near 1.
        scale = 2.0 if op == "product" else 100.0
        return [
            ((torch.rand(count, generator=generator, dtype=torch.float64) - 0.5) * scale).to(dtype) for _ in range(n)
        ]
    info = torch.iinfo(dtype)
    # The full range: sums and products wrap, as torch's do.
    return [
        torch.randint(info.min, info.max, (count,), generator=generator, dtype=torch.int64).to(dtype) for _ in range(n)
    ]


def _bits(t):
    return t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t.view(torch.uint8)


def _assert_bitwise(actual, expected):
    assert torch.equal(_bits(actual.contiguous()), _bits(expected.contiguous())), (actual, expected)


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS, ids=str)
@pytest.mark.parametrize("op", list(_TORCH_OP))
def test_reduce_matches_sequential_reference_bitwise(isa, dtype, op):
    if op.startswith("b") and dtype.is_floating_point:
        pytest.skip("bitwise ops are for integer types")
    generator = torch.Generator().manual_seed(hash((str(dtype), op)) % 1000)
    for n in range(1, 10):  # 2-8: the one-pass loop (reduce_direct), 9: the accumulator
        for count in COUNTS:
            sources = _sources(dtype, n, count, op, generator)
            out = torch.empty(count, dtype=dtype)
            _C.reduce_buffers(sources, out, op)
            _assert_bitwise(out, _reference(sources, op))


def test_output_may_alias_a_source(isa):
    """dst == a source, element for element (two-shot and single copy reduce in place), for
    each way of reducing: 2-8 sources one pass, 9 the accumulator, min/max too."""
    for n in (2, 3, 4, 5, 8, 9):
        for op, dtype in (
            ("sum", torch.float32),
            ("max", torch.float32),
            ("sum", torch.bfloat16),
            ("max", torch.int64),
        ):
            a = torch.arange(1025).to(dtype)
            others = [torch.full((1025,), 0.5 + k).to(dtype) for k in range(n - 1)]
            expected = _reference([a] + others, op)
            _C.reduce_buffers([a] + others, a, op)
            _assert_bitwise(a, expected)
            b = torch.arange(1025).to(dtype)  # the output is the last source
            expected = _reference(others + [b], op)
            _C.reduce_buffers(others + [b], b, op)
            _assert_bitwise(b, expected)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_min_max_propagate_nan_and_sums_round_once(isa, dtype):
    nan = torch.tensor([float("nan"), 1.0, 2.0] * 11, dtype=dtype)
    one = torch.ones(33, dtype=dtype)
    for op in ("min", "max"):
        for sources in ([one, nan], [nan, one], [one, one, nan], [nan, one, one, one, one]):
            out = torch.empty(33, dtype=dtype)
            _C.reduce_buffers(sources, out, op)
            # NaN payloads may differ from torch's (every rank runs the same kernel,
            # so ranks still agree bitwise); values and NaN positions must match.
            assert torch.allclose(out, _reference(sources, op), rtol=0, atol=0, equal_nan=True)
            assert out[::3].isnan().all()
    if dtype in (torch.bfloat16, torch.float16):
        # 1 + 2^-9 + ... rounded per step would lose every small term; in float32
        # they add up to a value the half type can represent.
        tiny = torch.full((40,), 2.0**-9, dtype=dtype)
        sources = [torch.ones(40, dtype=dtype)] + [tiny] * 4
        out = torch.empty(40, dtype=dtype)
        _C.reduce_buffers(sources, out, "sum")
        assert torch.equal(out.float(), torch.full((40,), 1.0 + 4 * 2.0**-9).to(dtype).float())
        assert out[0].item() > 1.0


def test_isa_levels_and_bad_calls_raise():
    assert _C.isa_supported(_C.best_isa())
    assert _C.isa_supported(_C.Isa.baseline)
    assert _C.active_isa() == _C.best_isa()  # no cap outside the isa fixture
    with pytest.raises(RuntimeError, match="unknown op 'avg'"):
        _C.reduce_buffers([torch.ones(2)], torch.ones(2), "avg")
    with pytest.raises(RuntimeError, match="fastcomm reduce: dtype Float with op"):
        _C.reduce_buffers([torch.ones(2)], torch.ones(2), "band")
    with pytest.raises(RuntimeError, match="shaped and typed like out"):
        _C.reduce_buffers([torch.ones(3)], torch.ones(2), "sum")
