"""SyncBatchNorm's CUDA kernels (skipped without a GPU): the CUDA operators
against the CPU ones (themselves tested against float64 references), the module
against nn.BatchNorm*d, no host synchronisation, and the collective path
through NCCL in a 1-rank fastcomm group."""

import datetime
import os
import sys

import pytest
import torch
import torch.distributed as dist

import fastcomm
from fastcomm.nn import SyncBatchNorm
from fastcomm.nn._syncbn_function import SyncBatchNormFunction

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "multiproc"))
from syncbn_reference import assert_close, batchnorm_class, forward_backward, global_batch, init_affine  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not fastcomm.cuda_kernels_compiled(),
    reason="needs a CUDA device and fastcomm built with its CUDA kernels",
)
ops = torch.ops.fastcomm

SHAPES = [
    ((3, 17), False),
    ((4096, 5), False),
    ((2, 3, 15), False),
    ((5, 2, 33, 33), False),
    ((4, 19, 5, 7), True),
    ((2, 3, 4, 5, 6), True),
    ((0, 3, 4), False),
    # Rows split over several blocks per channel, partial sums merged (syncbn.cuh).
    ((64, 3, 32, 32), False),
    ((64, 8, 16, 16), True),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("shape,channels_last", SHAPES, ids=str)
def test_cuda_ops_match_cpu_ops(shape, channels_last, dtype):
    x, dy = global_batch(shape[0], shape[1:], dtype, seed=1, channels_last=channels_last)
    xc, dyc = x.cuda(), dy.cuda()
    c = shape[1]
    packed = ops.syncbn_local_stats(x)
    packed_c = ops.syncbn_local_stats(xc)
    n = max(int(packed[0]), 1)
    rel = 1e-12 if dtype == torch.float64 else 2e-6
    torch.testing.assert_close(packed_c.cpu(), packed, rtol=rel, atol=rel * n)
    if packed[0] <= 1:
        return
    sd = torch.float64 if dtype == torch.float64 else torch.float32
    rm, rv = torch.zeros(c), torch.ones(c)
    rm_c, rv_c = rm.cuda(), rv.cuda()
    mean, invstd = ops.syncbn_finalize_stats(packed, 1e-5, 0.1, rm, rv, sd)
    mean_c, invstd_c = ops.syncbn_finalize_stats(packed.cuda(), 1e-5, 0.1, rm_c, rv_c, sd)
    for a, b in ((mean_c, mean), (invstd_c, invstd), (rm_c, rm), (rv_c, rv)):
        torch.testing.assert_close(a.cpu(), b)
    w, b = torch.linspace(0.5, 1.5, c), torch.linspace(-0.3, 0.4, c)
    y = ops.syncbn_normalize(x, mean, invstd, w, b)
    y_c = ops.syncbn_normalize(xc, mean.cuda(), invstd.cuda(), w.cuda(), b.cuda())
    assert y_c.stride() == y.stride()
    assert_close(y_c.cpu(), y.double(), dtype, "normalize")
    sums = ops.syncbn_grad_sums(dy, x, mean)
    sums_c = ops.syncbn_grad_sums(dyc, xc, mean.cuda())
    torch.testing.assert_close(sums_c.cpu(), sums, rtol=10 * rel, atol=10 * rel * n)
    dx = ops.syncbn_grad_input(dy, x, mean, invstd, w, sums, packed)
    dx_c = ops.syncbn_grad_input(dyc, xc, mean.cuda(), invstd.cuda(), w.cuda(), sums.cuda(), packed.cuda())
    assert_close(dx_c.cpu(), dx.double(), dtype, "grad_input")


@pytest.mark.parametrize("feature_shape,channels_last", [((5,), False), ((3, 5, 4), False), ((6, 5, 4), True)], ids=str)
def test_module_on_cuda_matches_batchnorm(feature_shape, channels_last):
    ours = SyncBatchNorm(feature_shape[0]).cuda()
    ref = batchnorm_class(1 + len(feature_shape))(feature_shape[0], dtype=torch.float64).cuda()
    init_affine(ours)
    init_affine(ref)
    x, dy = global_batch(8, feature_shape, torch.float32, seed=2, channels_last=channels_last)
    y, dx = forward_backward(ours, x.cuda(), dy.cuda())
    y_ref, dx_ref = forward_backward(ref, x.double().cuda(), dy.double().cuda())
    assert_close(y, y_ref, torch.float32, "output")
    assert_close(dx, dx_ref, torch.float32, "input grad")
    assert_close(ours.weight.grad, ref.weight.grad, torch.float32, "weight grad")
    assert_close(ours.running_var, ref.running_var, torch.float32, "running_var")


def test_no_host_synchronisation():
    bn = SyncBatchNorm(8).cuda()
    x = torch.randn(16, 8, 10, 10, device="cuda", requires_grad=True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        bn(x).square().sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.fixture
def single_rank_group():
    dist.init_process_group(
        "fastcomm", store=dist.HashStore(), rank=0, world_size=1, timeout=datetime.timedelta(seconds=60)
    )
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_collective_path_through_nccl(single_rank_group):
    """The all_reduce of the packed buffers runs on CUDA tensors; a group of one changes nothing."""
    x = torch.randn(6, 4, 3, 3, device="cuda", dtype=torch.float64, requires_grad=True)
    w = torch.rand(4, device="cuda", dtype=torch.float64, requires_grad=True)
    b = torch.rand(4, device="cuda", dtype=torch.float64, requires_grad=True)
    outputs = []
    for group in (single_rank_group, None):
        y = SyncBatchNormFunction.apply(x, w, b, None, None, 1e-5, 0.1, group)
        grads = torch.autograd.grad(y.square().sum(), (x, w, b))
        outputs.append((y, *grads))
    for a, c in zip(*outputs):
        torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_bad_arguments_refused_before_the_kernels():
    """The shared argument checks refuse on CUDA what they refuse on CPU
    (tests/unit/test_syncbn_ops.py), and packed statistics on another device
    than the input, before a kernel could read them."""
    cuda = torch.device("cuda")
    packed = torch.tensor([4.0, 2, 2, 3, 3], dtype=torch.float64, device=cuda)
    with pytest.raises(RuntimeError, match="running_mean and running_var must share a dtype"):
        ops.syncbn_finalize_stats(
            packed,
            1e-5,
            0.1,
            torch.zeros(2, device=cuda),
            torch.zeros(2, dtype=torch.float64, device=cuda),
            torch.float32,
        )
    with pytest.raises(RuntimeError, match="running_mean must be contiguous"):
        ops.syncbn_finalize_stats(packed, 1e-5, 0.1, torch.zeros(4, device=cuda)[::2], None, torch.float32)
    x = torch.ones(4, 2, device=cuda)
    mean, invstd = torch.zeros(2, device=cuda), torch.ones(2, device=cuda)
    sums = torch.zeros(4, dtype=torch.float64, device=cuda)
    with pytest.raises(RuntimeError, match="fastcomm syncbn_grad_input: packed is on cpu, expected cuda"):
        ops.syncbn_grad_input(x, x, mean, invstd, None, sums, packed.cpu())


@pytest.mark.parametrize("count", [0.0, 1.0])
def test_finalize_with_too_few_values_keeps_the_running_statistics(count):
    """The CPU op raises (tests/unit/test_syncbn_ops.py); the CUDA op cannot read
    the count without waiting for the device, so it returns NaN statistics and
    leaves the running statistics as they were (never NaN or inf in them)."""
    cuda = torch.device("cuda")
    packed = torch.tensor([count, 2.0 * count, 3.0 * count, 0.0, 0.0], dtype=torch.float64, device=cuda)
    running_mean, running_var = torch.full((2,), 0.5, device=cuda), torch.full((2,), 2.0, device=cuda)
    mean, invstd = ops.syncbn_finalize_stats(packed, 1e-5, 0.1, running_mean, running_var, torch.float32)
    assert torch.isnan(mean).all() and torch.isnan(invstd).all()
    assert torch.equal(running_mean.cpu(), torch.full((2,), 0.5))
    assert torch.equal(running_var.cpu(), torch.full((2,), 2.0))
