"""The low-precision all_reduce's fused sum (compress::low_precision_sum_cpu,
csrc/kernels/cpu/low_precision_sum.cpp) against its definition in plain torch
(fastcomm.hooks.reference.low_precision_all_reduce: scaled copies, a float32
sum in source order, rounded once), for every instruction-set level this CPU
runs: every source dtype and wire dtype, with and without a limit, 1-5, 8 and 9
sources (2-8 take one fused loop each, 1 and 9 go block by block), lengths
around the vector widths and the 1024-element blocks, values of every magnitude
(clamped ones, inf, NaN); per-source clamp counts; the output aliasing a
source."""

import pytest
import torch

from fastcomm import _C
from fastcomm.hooks import reference

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
WIRES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
COUNTS = [0, 1, 7, 8, 15, 16, 17, 1023, 1024, 1025, 4099]


def _sources(n: int, count: int, dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for q in range(n):
        x = torch.randn(count, generator=g, dtype=torch.float64) * torch.exp(
            torch.randn(count, generator=g, dtype=torch.float64) * 4
        )
        if count > 9:
            x[3] = 1e6 * (q + 1)
            x[5] = float("inf") if q == 0 else -1.0
            x[7] = float("nan") if q == n - 1 else 0.0
            x[9] = -0.0
        out.append(x.to(dtype))
    return out


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({8: torch.int64, 4: torch.int32, 2: torch.int16}[t.element_size()])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("wire", sorted(WIRES))
@pytest.mark.parametrize("limit", [float("inf"), 32752.0, 2.0])
def test_matches_definition(isa, dtype, wire, limit):
    for n in (1, 2, 3, 4, 5, 8, 9):
        for count in COUNTS:
            sources = _sources(n, count, dtype, seed=n * 10_000 + count)
            scale = 1.0 / n
            want, counts = reference.low_precision_all_reduce(sources, WIRES[wire], scale, limit)
            out = torch.full_like(sources[0], 7.0)
            clamped = _C.low_precision_sum(sources, out, wire, scale, limit)
            what = f"{isa} {dtype} {wire} limit {limit} n={n} count={count}"
            torch.testing.assert_close(out, want, rtol=0, atol=0, equal_nan=True, msg=what)
            assert clamped == counts, (what, clamped, counts)


@pytest.mark.parametrize("wire", sorted(WIRES))
def test_levels_agree_bitwise_nan_included(wire):
    """Every level gives the same bits, NaN payloads included (the vector
    loops round through the wire dtype as the scalar code does)."""
    sources = _sources(3, 5000, torch.float32, seed=1)
    results = []
    for name in ("baseline", "avx2", "avx512"):
        level = getattr(_C.Isa, name)
        if not _C.isa_supported(level):
            continue
        _C.set_isa_cap(level)
        try:
            out = torch.empty(5000)
            results.append((name, _C.low_precision_sum(sources, out, wire, 1 / 3, 32752.0), _bits(out)))
        finally:
            _C.set_isa_cap(_C.Isa.avx512)
    for name, clamped, bits in results[1:]:
        assert clamped == results[0][1], (name, clamped, results[0][1])
        assert torch.equal(bits, results[0][2]), name


@pytest.mark.parametrize("dtype", DTYPES)
def test_output_may_be_a_source(isa, dtype):
    for n in (2, 3, 5, 8, 9):  # two to eight sources take one fused loop each, nine the blocks
        for at in range(n):
            sources = _sources(n, 3001, dtype, seed=at)
            want, counts = reference.low_precision_all_reduce(sources, torch.float16, 1 / n, 32752.0)
            clamped = _C.low_precision_sum(sources, sources[at], "float16", 1 / n, 32752.0)
            what = f"{dtype} n={n} out = source {at}"
            torch.testing.assert_close(sources[at], want, rtol=0, atol=0, equal_nan=True, msg=what)
            assert clamped == counts, what


def test_bad_calls_raise():
    with pytest.raises(RuntimeError, match="fastcomm low_precision_sum: wire must be 'float16' or 'bfloat16'"):
        _C.low_precision_sum([torch.ones(2)], torch.ones(2), "float32", 1.0, 1.0)
    with pytest.raises(RuntimeError, match="fastcomm low_precision_sum: no sources"):
        _C.low_precision_sum([], torch.ones(2), "float16", 1.0, 1.0)
    with pytest.raises(RuntimeError, match="fastcomm low_precision_sum: sources must be"):
        _C.low_precision_sum([torch.ones(3)], torch.ones(2), "float16", 1.0, 1.0)
