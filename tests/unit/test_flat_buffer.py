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


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_rank_major_layout(world_size):
    chunks = [2, 5, 1]
    tensors = [torch.arange(world_size * c, dtype=torch.int32) + 100 * i for i, c in enumerate(chunks)]
    flat = torch.empty(sum(t.numel() for t in tensors), dtype=torch.int32)
    _C.pack_rank_major(flat, tensors, world_size, True)
    expected = torch.cat([t.view(world_size, -1)[r] for r in range(world_size) for t in tensors])
    assert torch.equal(flat, expected)
    back = [torch.zeros_like(t) for t in tensors]
    _C.pack_rank_major(flat, back, world_size, False)
    for a, b in zip(back, tensors):
        assert torch.equal(a, b)
