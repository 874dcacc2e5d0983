"""CUDA path: fastcomm's copy kernel and the NCCL delegate (skipped without a GPU).

A world-size-1 group is used so the tests run on a single GPU; NCCL runs the
collectives and fastcomm's kernels do the packing around them.
"""

import datetime

import pytest
import torch
import torch.distributed as dist

import fastcomm
from fastcomm import _C

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not fastcomm.cuda_kernels_compiled(),
    reason="needs a CUDA device and fastcomm built with its CUDA kernels",
)


# [7, 1 << 20, 3]: the large segment starts 7 elements into the flat buffer, so
# it and its source share a 16-byte alignment for no dtype: float64 copies it in
# 8-byte words, float32 in 4, bfloat16 in 2 (each between a head and a tail of
# bytes), int8 in bytes.
@pytest.mark.parametrize("sizes", [[1], [3, 0, 17], [1 << 20, 5, 4096, 1 << 16], [7, 1 << 20, 3]], ids=str)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int8, torch.float64])
def test_cuda_pack_unpack_matches_cat(sizes, dtype):
    tensors = [torch.randint(0, 100, (n,), device="cuda").to(dtype) for n in sizes]
    flat = _C.pack(tensors)
    assert flat.is_cuda
    assert torch.equal(flat, torch.cat(tensors))
    out = [torch.empty_like(t) for t in tensors]
    _C.unpack(flat, out)
    for a, b in zip(out, tensors):
        assert torch.equal(a, b)


def test_cuda_pack_unaligned_offsets():
    """Byte-granular segments (odd offsets) take the kernel's unaligned path."""
    base = torch.arange(101, dtype=torch.uint8, device="cuda")
    parts = [base[1:8], base[9:40], base[41:101]]
    flat = _C.pack(parts)
    assert torch.equal(flat, torch.cat(parts))


@pytest.fixture
def single_rank_group():
    dist.init_process_group(
        "fastcomm", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )
    yield fastcomm.fastcomm_backend()
    dist.destroy_process_group()


def test_cuda_collectives_through_nccl(single_rank_group):
    backend = single_rank_group
    assert "nccl" in backend.algorithm_names()
    t = torch.arange(8, dtype=torch.float32, device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert torch.equal(t.cpu(), torch.arange(8, dtype=torch.float32))
    i16 = torch.tensor([1, -2, 3], dtype=torch.int16, device="cuda")
    dist.all_reduce(i16)  # NCCL has no int16: fastcomm widens
    assert torch.equal(i16.cpu(), torch.tensor([1, -2, 3], dtype=torch.int16))
    a, b = torch.ones(5, device="cuda"), torch.full((3,), 2.0, device="cuda")
    before = backend.algorithm_counts().get("coalesced_via_flat_buffer", 0)
    with dist._coalescing_manager():
        dist.all_reduce(a)
        dist.all_reduce(b)
    torch.cuda.synchronize()
    assert backend.algorithm_counts()["coalesced_via_flat_buffer"] == before + 1
    assert torch.equal(a.cpu(), torch.ones(5)) and torch.equal(b.cpu(), torch.full((3,), 2.0))
    # CPU tensors in the same group still go through Gloo
    c = torch.ones(4)
    dist.all_reduce(c)
    assert torch.equal(c, torch.ones(4))


def test_pack_unpack_beyond_2_31_elements():
    """Indexing past 2^31 elements, from an odd offset (the unaligned path)."""
    big = torch.arange(256, dtype=torch.uint8, device="cuda").repeat((1 << 31) // 256 + 1)
    small = torch.full((7,), 5, dtype=torch.uint8, device="cuda")
    flat = _C.pack([small, big])
    assert flat.numel() == big.numel() + 7
    assert torch.equal(flat[:7], small) and torch.equal(flat[7:], big)
    out = [torch.empty_like(small), torch.zeros_like(big)]
    _C.unpack(flat, out)
    assert torch.equal(out[0], small) and torch.equal(out[1], big)
