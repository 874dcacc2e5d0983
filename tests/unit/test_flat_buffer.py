"""The multi-tensor copy kernel behind pack/unpack, against torch.cat/split."""

import pytest
import torch

from fastcomm import _C

SIZES = [[1], [0, 3, 0], [7, 1, 1023, 5], [1 << 18, 3, 1 << 17]]  # awkward and > the parallel threshold


@pytest.mark.parametrize("sizes", SIZES, ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.float64, torch.bool])
def test_pack_unpack_round_trip(sizes, dtype):
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randint(0, 100, (n,), generator=g).to(dtype) for n in sizes]
    flat = _C.pack(tensors)
    assert flat.dtype == dtype and flat.numel() == sum(sizes)
    assert torch.equal(flat, torch.cat(tensors))
    out = [torch.empty_like(t) for t in tensors]
    _C.unpack(flat, out)
    for a, b in zip(out, tensors):
        assert torch.equal(a, b)


def test_pack_into_views_and_errors():
    """pack_into writes into a slice of a larger buffer; mismatches are refused."""
    big = torch.zeros(10, dtype=torch.int32)
    parts = [torch.arange(3, dtype=torch.int32), torch.arange(4, dtype=torch.int32) + 10]
    _C.pack_into(big.narrow(0, 2, 7), parts)
    assert torch.equal(big, torch.tensor([0, 0, 0, 1, 2, 10, 11, 12, 13, 0], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="fastcomm pack: flat buffer has 6 elements, the tensors 7"):
        _C.pack_into(torch.zeros(6, dtype=torch.int32), parts)
    with pytest.raises(RuntimeError, match="fastcomm pack: tensors must be contiguous and match"):
        _C.pack_into(torch.zeros(7), parts)
    with pytest.raises(RuntimeError, match="fastcomm pack: tensors must be contiguous"):
        _C.unpack(torch.zeros(4), [torch.zeros(8)[::2]])
