"""The fastcomm::syncbn_* operators (CPU kernels) against float64 references
written with torch ops, on awkward shapes, both memory layouts and every dtype."""

import pytest
import torch

import fastcomm  # noqa: F401  (loads the operators)

ops = torch.ops.fastcomm

# (shape, memory format): rows layout (C innermost), planes with fewer or more
# elements than the kernels' lanes, enough per channel to cross the fold steps
# and the parallel threshold, channels-last 2d/3d, empty.
SHAPES = [
    ((1, 1), torch.contiguous_format),
    ((3, 17), torch.contiguous_format),
    ((70000, 3), torch.contiguous_format),
    ((2, 3, 15), torch.contiguous_format),
    ((2, 3, 17), torch.contiguous_format),
    ((5, 2, 33, 33), torch.contiguous_format),
    ((2, 40, 300), torch.contiguous_format),
    ((4, 19, 5, 7), torch.channels_last),
    ((2, 3, 4, 5, 6), torch.channels_last_3d),
    ((0, 3, 4), torch.contiguous_format),
]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def _input(shape, fmt, dtype, seed=0, scale=3.0, offset=1.5):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(*shape, generator=g, dtype=torch.float64) * scale + offset).to(dtype)
    return x.contiguous(memory_format=fmt)


def _per_channel(t: torch.Tensor) -> torch.Tensor:
    """(N, C, *) -> (C, N * prod(*)) in float64."""
    return t.double().transpose(0, 1).reshape(t.size(1), -1)


def _stats_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _rel(dtype):
    return 1e-12 if dtype == torch.float64 else 2e-6


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,fmt", SHAPES, ids=lambda v: str(v))
def test_local_stats(shape, fmt, dtype):
    x = _input(shape, fmt, dtype)
    packed = ops.syncbn_local_stats(x)
    xs = _per_channel(x)
    n = xs.size(1)
    expected = torch.cat([torch.tensor([float(n)], dtype=torch.float64), xs.sum(1), xs.square().sum(1)])
    assert packed.dtype == torch.float64 and packed.shape == (1 + 2 * shape[1],)
    assert packed[0].item() == n
    # S1 can cancel to near 0, so the absolute tolerance scales with the element count
    torch.testing.assert_close(packed, expected, rtol=_rel(dtype), atol=_rel(dtype) * max(n, 1))
    if n > 1:  # the variance from the packed sums, against torch's
        mean = packed[1 : 1 + shape[1]] / n
        var = packed[1 + shape[1] :] / n - mean * mean
        torch.testing.assert_close(var, xs.var(1, unbiased=False), rtol=10 * _rel(dtype), atol=1e-9)


def test_local_stats_large_mean_is_accurate():
    """Welford (not a float32 sum of squares): the variance survives a mean of 1e3 std."""
    x = _input((64, 4, 32, 32), torch.contiguous_format, torch.float32, scale=1.0, offset=1000.0)
    packed = ops.syncbn_local_stats(x)
    n = packed[0]
    mean = packed[1:5] / n
    var = packed[5:] / n - mean * mean
    torch.testing.assert_close(var, _per_channel(x).var(1, unbiased=False), rtol=1e-4, atol=0)


@pytest.mark.parametrize(
    "fmt_shape",
    [((6, 5), torch.contiguous_format), ((3, 5, 40, 3), torch.channels_last), ((3, 5, 40, 3), torch.contiguous_format)],
    ids=str,
)
def test_reductions_do_not_depend_on_thread_count(fmt_shape):
    shape, fmt = fmt_shape
    shape = (shape[0] * 4000,) + shape[1:]
    x = _input(shape, fmt, torch.float32)
    dy = _input(shape, fmt, torch.float32, seed=1)
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            packed = ops.syncbn_local_stats(x)
            mean = (packed[1 : 1 + shape[1]] / packed[0]).float()
            results.append((packed, ops.syncbn_grad_sums(dy, x, mean)))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("running_dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("stats_dtype", [torch.float32, torch.float64])
def test_finalize_stats(stats_dtype, running_dtype):
    n, s1, s2 = 10.0, torch.tensor([5.0, -20.0, 0.0]), torch.tensor([12.5, 50.0, 0.0])
    packed = torch.cat([torch.tensor([n]), s1, s2]).double()
    running_mean = torch.tensor([1.0, 2.0, 3.0], dtype=running_dtype)
    running_var = torch.tensor([4.0, 5.0, 6.0], dtype=running_dtype)
    mean, invstd = ops.syncbn_finalize_stats(packed, 1e-5, 0.25, running_mean, running_var, stats_dtype)
    exp_mean = s1.double() / n
    m2 = s2.double() - s1.double() * exp_mean  # [10, 10, 0]
    assert mean.dtype == invstd.dtype == stats_dtype
    torch.testing.assert_close(mean, exp_mean.to(stats_dtype))
    torch.testing.assert_close(invstd, (1 / torch.sqrt(m2 / n + 1e-5)).to(stats_dtype))
    torch.testing.assert_close(
        running_mean, (0.75 * torch.tensor([1.0, 2, 3]).double() + 0.25 * exp_mean).to(running_dtype)
    )
    torch.testing.assert_close(
        running_var, (0.75 * torch.tensor([4.0, 5, 6]).double() + 0.25 * m2 / (n - 1)).to(running_dtype)
    )
    # no running statistics: nothing to update
    ops.syncbn_finalize_stats(packed, 1e-5, 0.25, None, None, stats_dtype)


def _bn_reference(x, dy, weight, bias, eps=1e-5):
    """float64 batch norm forward and input gradient from the definition."""
    xs = x.double()
    dims = [0] + list(range(2, x.dim()))
    shape = [1, -1] + [1] * (x.dim() - 2)
    mean = xs.mean(dims)
    invstd = 1 / torch.sqrt(xs.var(dims, unbiased=False) + eps)
    w = weight.double() if weight is not None else torch.ones_like(mean)
    b = bias.double() if bias is not None else torch.zeros_like(mean)
    xhat = (xs - mean.view(shape)) * invstd.view(shape)
    y = xhat * w.view(shape) + b.view(shape)
    g = dy.double()
    n = xs.numel() // xs.size(1)
    sum_dy = g.sum(dims)
    sum_dy_xmu = (g * (xs - mean.view(shape))).sum(dims)
    dx = (w * invstd).view(shape) * (g - (sum_dy / n).view(shape) - xhat * (sum_dy_xmu * invstd / n).view(shape))
    return mean, invstd, y, torch.cat([sum_dy, sum_dy_xmu]), dx


OUT_TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-10, 1e-10),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (2e-3, 2e-3),
}


@pytest.mark.parametrize("affine", ["weight_and_bias", "weight_only", "none"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape,fmt", [s for s in SHAPES if s[0][0] > 1 and s[0][0] * s[0][1] < 10**6], ids=lambda v: str(v)
)
def test_normalize_and_gradients(shape, fmt, dtype, affine):
    x = _input(shape, fmt, dtype)
    dy = _input(shape, torch.contiguous_format, dtype, seed=1)  # another memory format than x where x is channels-last
    c = shape[1]
    weight = torch.linspace(0.5, 1.5, c) if affine != "none" else None
    bias = torch.linspace(-0.3, 0.4, c) if affine == "weight_and_bias" else None
    mean, invstd, y_ref, sums_ref, dx_ref = _bn_reference(x, dy, weight, bias)
    sd = _stats_dtype(dtype)
    y = ops.syncbn_normalize(x, mean.to(sd), invstd.to(sd), weight, bias)
    assert y.dtype == dtype and y.stride() == x.stride()
    rtol, atol = OUT_TOL[dtype]
    torch.testing.assert_close(y.double(), y_ref, rtol=rtol, atol=atol)
    sums = ops.syncbn_grad_sums(dy, x, mean.to(sd))
    n = x.numel() // c
    torch.testing.assert_close(sums, sums_ref, rtol=_rel(dtype) * 10, atol=_rel(dtype) * 10 * n)
    packed = torch.cat([torch.tensor([float(n)], dtype=torch.float64), torch.zeros(2 * c, dtype=torch.float64)])
    dx = ops.syncbn_grad_input(dy, x, mean.to(sd), invstd.to(sd), weight, sums_ref, packed)
    assert dx.dtype == dtype and dx.stride() == x.stride()
    torch.testing.assert_close(dx.double(), dx_ref, rtol=rtol, atol=atol)


def test_non_contiguous_input_is_copied():
    base = _input((4, 3, 10, 8), torch.contiguous_format, torch.float32)
    x = base[:, :, ::2, 1:]
    assert not x.is_contiguous()
    assert torch.equal(ops.syncbn_local_stats(x), ops.syncbn_local_stats(x.contiguous()))


@pytest.mark.parametrize(
    "call,message",
    [
        (
            lambda: ops.syncbn_local_stats(torch.ones(3)),
            r"fastcomm syncbn_local_stats: expected at least 2D input \(got 1D input\)",
        ),
        (lambda: ops.syncbn_local_stats(torch.ones(3, 0)), r"fastcomm syncbn_local_stats: the input has no channels"),
        (
            lambda: ops.syncbn_local_stats(torch.ones(3, 2, dtype=torch.int32)),
            r"fastcomm syncbn_local_stats: expected a floating-point input, got Int",
        ),
        (
            lambda: ops.syncbn_normalize(torch.ones(4, 3), torch.zeros(2), torch.ones(3), None, None),
            r"fastcomm syncbn_normalize: mean should contain 3 elements, got shape \[2\]",
        ),
        (
            lambda: ops.syncbn_normalize(
                torch.ones(4, 3), torch.zeros(3, dtype=torch.float64), torch.ones(3), None, None
            ),
            r"fastcomm syncbn_normalize: mean should be Float, got Double",
        ),
        (
            lambda: ops.syncbn_normalize(torch.ones(4, 3), torch.zeros(3), torch.ones(3), torch.ones(4), None),
            r"fastcomm syncbn_normalize: weight should contain 3 elements",
        ),
        (
            lambda: ops.syncbn_finalize_stats(
                torch.zeros(4, dtype=torch.float64), 1e-5, 0.1, None, None, torch.float32
            ),
            r"fastcomm syncbn_finalize_stats: expected packed statistics",
        ),
        (
            lambda: ops.syncbn_finalize_stats(
                torch.tensor([1.0, 2, 3], dtype=torch.float64), 1e-5, 0.1, None, None, torch.float32
            ),
            r"fastcomm syncbn_finalize_stats: expected more than 1 value per channel over the group, got 1",
        ),
        (
            lambda: ops.syncbn_finalize_stats(
                torch.tensor([4.0, 2, 3], dtype=torch.float64), 1e-5, 0.1, torch.zeros(2), None, torch.float32
            ),
            r"fastcomm syncbn_finalize_stats: running_mean should contain 1 elements",
        ),
        (
            lambda: ops.syncbn_finalize_stats(
                torch.tensor([4.0, 2, 3], dtype=torch.float64),
                1e-5,
                0.1,
                torch.zeros(1),
                torch.zeros(1, dtype=torch.float64),
                torch.float32,
            ),
            r"fastcomm syncbn_finalize_stats: running_mean and running_var must share a dtype, got Float and Double",
        ),
        (
            lambda: ops.syncbn_finalize_stats(
                torch.tensor([4.0, 2, 2, 3, 3], dtype=torch.float64),
                1e-5,
                0.1,
                torch.zeros(4)[::2],
                None,
                torch.float32,
            ),
            r"fastcomm syncbn_finalize_stats: running_mean must be contiguous \(it is updated in place\)",
        ),
        (
            lambda: ops.syncbn_finalize_stats(
                torch.tensor([4.0, 2, 2, 3, 3], dtype=torch.float64),
                1e-5,
                0.1,
                None,
                torch.zeros(4)[::2],
                torch.float32,
            ),
            r"fastcomm syncbn_finalize_stats: running_var must be contiguous \(it is updated in place\)",
        ),
        (
            lambda: ops.syncbn_grad_sums(torch.ones(4, 2), torch.ones(4, 3), torch.zeros(3)),
            r"fastcomm syncbn_grad_sums: expected a tensor of shape \[4, 3\], got \[4, 2\]",
        ),
        (
            lambda: ops.syncbn_grad_input(
                torch.ones(4, 3),
                torch.ones(4, 3),
                torch.zeros(3),
                torch.ones(3),
                None,
                torch.zeros(6, dtype=torch.float64),
                torch.zeros(5, dtype=torch.float64),
            ),
            r"fastcomm syncbn_grad_input: packed statistics describe 2 channels, the input has 3",
        ),
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


def test_strided_statistics_vectors():
    """Statistics and sums given as strided views (every other element) give the same results."""
    x = _input((4, 3, 5), torch.contiguous_format, torch.float32)
    dy = _input((4, 3, 5), torch.contiguous_format, torch.float32, seed=1)
    mean, invstd, _, sums, _ = _bn_reference(x, dy, None, None)
    spread = lambda t, dtype: torch.stack([t.to(dtype), torch.full_like(t, 1e9, dtype=dtype)], 1).reshape(-1)[::2]  # noqa: E731
    strided = dict(mean=spread(mean, torch.float32), invstd=spread(invstd, torch.float32))
    assert not strided["mean"].is_contiguous()
    packed = ops.syncbn_local_stats(x)
    w = torch.linspace(0.5, 1.5, 3)
    assert torch.equal(
        ops.syncbn_normalize(x, strided["mean"], strided["invstd"], w, None),
        ops.syncbn_normalize(x, mean.float(), invstd.float(), w, None),
    )
    assert torch.equal(ops.syncbn_grad_sums(dy, x, strided["mean"]), ops.syncbn_grad_sums(dy, x, mean.float()))
    assert torch.equal(
        ops.syncbn_grad_input(dy, x, strided["mean"], strided["invstd"], w, spread(sums, torch.float64), packed),
        ops.syncbn_grad_input(dy, x, mean.float(), invstd.float(), w, sums, packed),
    )
