"""fastcomm.nn.SyncBatchNorm's CPU kernels (fastcomm::syncbn_* operators)
against the torch ops its peer uses (torch's SyncBatchNorm algorithm with its
GPU-only kernels written as torch CPU ops, benchmarks/torch_syncbn_algorithm.py).
One 16x128x28x28 float32 activation (6.1 MiB). Bytes: the input (and output
gradient) read, the output written."""

import pytest
import torch

import fastcomm  # noqa: F401  (loads the operators)
from bench_helpers import run

ops = torch.ops.fastcomm
SHAPE = (16, 128, 28, 28)


@pytest.fixture(scope="module")
def tensors():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*SHAPE, generator=g)
    dy = torch.randn(*SHAPE, generator=g)
    mean, invstd = x.mean((0, 2, 3)), 1 / x.var((0, 2, 3)).add(1e-5).sqrt()
    return x, dy, mean, invstd


@pytest.mark.benchmark(group="syncbn statistics")
@pytest.mark.parametrize("impl", ["fastcomm local_stats", "torch var_mean"])
def test_local_stats(benchmark, tensors, impl):
    x = tensors[0]
    if impl.startswith("fastcomm"):
        run(benchmark, lambda: ops.syncbn_local_stats(x), x.nbytes)
    else:
        run(benchmark, lambda: torch.var_mean(x, (0, 2, 3), unbiased=False), x.nbytes)


@pytest.mark.benchmark(group="syncbn normalize")
@pytest.mark.parametrize("impl", ["fastcomm normalize", "torch ops"])
def test_normalize(benchmark, tensors, impl):
    x, _, mean, invstd = tensors
    if impl.startswith("fastcomm"):
        run(benchmark, lambda: ops.syncbn_normalize(x, mean, invstd, None, None), 2 * x.nbytes)
    else:
        shape = (1, -1, 1, 1)
        run(benchmark, lambda: (x - mean.view(shape)) * invstd.view(shape), 2 * x.nbytes)


@pytest.mark.benchmark(group="syncbn gradient sums")
@pytest.mark.parametrize("impl", ["fastcomm grad_sums", "torch ops"])
def test_grad_sums(benchmark, tensors, impl):
    x, dy, mean, _ = tensors
    if impl.startswith("fastcomm"):
        run(benchmark, lambda: ops.syncbn_grad_sums(dy, x, mean), 2 * x.nbytes)
    else:
        run(benchmark, lambda: (dy.sum((0, 2, 3)), (dy * (x - mean.view(1, -1, 1, 1))).sum((0, 2, 3))), 2 * x.nbytes)
