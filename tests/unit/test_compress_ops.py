"""The fastcomm::compress_* operators (CPU kernels) against the plain torch
references in fastcomm.hooks.reference: awkward sizes, every gradient dtype,
with and without error feedback; payloads and sums bitwise, error buffers
to a stated tolerance (the kernels may round x - q*scale differently)."""

import math

import pytest
import torch

import fastcomm  # noqa: F401  (loads the operators)
from compress_cases import DTYPES, SIZES, check_int8, check_pack_unpack, check_sign, check_topk, gradient

ops = torch.ops.fastcomm


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dst_dtype", DTYPES)
@pytest.mark.parametrize("limit", [float("inf"), 100.0])
def test_multi_tensor_pack_unpack(isa, dtype, dst_dtype, limit):
    check_pack_unpack("cpu", dtype, dst_dtype, limit)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_error", [False, True])
def test_int8(isa, n, dtype, with_error):
    check_int8("cpu", n, dtype, 64, with_error)


@pytest.mark.parametrize("block", [1, 3, 256, 100000])
def test_int8_block_sizes(block):
    check_int8("cpu", 1000, torch.float32, block, True)


def test_int8_zero_and_nonfinite_blocks():
    x = torch.zeros(12)
    x[9] = float("nan")
    err = torch.full((12,), 0.5)
    err[:4] = 0.0
    payload = ops.compress_int8_quantize(x, err, 4, False, 0)
    scales = payload[:12].view(torch.float32)
    assert scales[0] == 0 and scales[1] > 0 and scales[2].isnan()
    assert torch.equal(err[:4], torch.zeros(4)) and torch.equal(err[8:], torch.zeros(4))  # no NaN kept
    out = torch.empty(12)
    ops.compress_int8_dequantize_sum(payload.view(1, -1), out, 4, 1.0)
    assert torch.equal(out[:4], torch.zeros(4)) and torch.equal(out[4:8], torch.full((4,), 0.5))
    assert out[8:].isnan().all()


def test_int8_stochastic_rounding(isa):
    """Each value rounds to one of its two neighbours, the same for the same seed,
    differently for another, and unbiased: the mean of many draws is the value."""
    x = torch.tensor([127.0] + [0.3, -2.5, 10.75, -0.01] * 64)
    draws = []
    for seed in range(400):
        payload = ops.compress_int8_quantize(x, None, x.numel(), True, seed)
        draws.append(payload[4 : 4 + x.numel()].view(torch.int8).float())
    draws = torch.stack(draws)
    assert torch.equal(draws[:, 0], torch.full((400,), 127.0))
    assert ((draws == x.floor()) | (draws == x.ceil())).all()
    again = ops.compress_int8_quantize(x, None, x.numel(), True, 0)[4 : 4 + x.numel()].view(torch.int8).float()
    assert torch.equal(again, draws[0]) and not torch.equal(draws[0], draws[1])
    # 400 draws of a Bernoulli: standard error <= 0.025; 0.1 is 4 of them.
    torch.testing.assert_close(draws.mean(0), x, atol=0.1, rtol=0)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_error", [False, True])
def test_topk(n, dtype, with_error):
    for k in sorted({1, max(1, n // 100), max(1, n // 3), n}):
        check_topk("cpu", n, dtype, k, with_error)


def test_topk_nan_is_sent_and_not_kept():
    x = torch.tensor([1.0, float("nan"), -3.0, 2.0, float("inf")])
    err = torch.zeros(5)
    payload = ops.compress_topk(x, err, 2)
    assert payload[2:].tolist() == [1, 4]
    assert torch.equal(err, torch.tensor([1.0, 0.0, -3.0, 2.0, 0.0]))


def test_topk_sum_rejects_bad_index():
    payload = torch.tensor([[0, 0, 1, 5]], dtype=torch.int32)
    with pytest.raises(
        RuntimeError, match=r"fastcomm compress_topk_sum: rank 0's payload has index 5 outside \[0, 4\)"
    ):
        ops.compress_topk_sum(payload, torch.empty(4), 1.0)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_error", [False, True])
def test_sign(isa, n, dtype, with_error):
    check_sign("cpu", n, dtype, with_error)


def test_sign_error_feedback_is_the_residual():
    """Over steps, what was sent plus what is kept equals everything given."""
    err = torch.zeros(100)
    sent = torch.zeros(100)
    given = torch.zeros(100)
    for step in range(5):
        g = gradient(100, torch.float32, seed=step)
        payload = ops.compress_sign(g, err)
        out = torch.empty(100)
        ops.compress_sign_sum(payload.view(1, -1), out, 1.0)
        sent += out
        given += g
    torch.testing.assert_close(sent + err, given, atol=1e-5, rtol=0)


@pytest.mark.parametrize("threads", [1, 2])
def test_results_do_not_depend_on_threads(threads):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        x = gradient(200003, torch.float32)
        outs = [
            ops.compress_int8_quantize(x, None, 256, True, 3),
            ops.compress_topk(x, None, 1000),
            ops.compress_sign(x, None),
        ]
    finally:
        torch.set_num_threads(before)
    torch.set_num_threads(1 if threads == 2 else 2)
    try:
        again = [
            ops.compress_int8_quantize(x, None, 256, True, 3),
            ops.compress_topk(x, None, 1000),
            ops.compress_sign(x, None),
        ]
    finally:
        torch.set_num_threads(before)
    for a, b in zip(outs, again):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: ops.compress_int8_quantize(torch.zeros(4, dtype=torch.int32), None, 4, False, 0),
            "compress_int8_quantize: src must be float32, float64, bfloat16 or float16, got Int",
        ),
        (
            lambda: ops.compress_int8_quantize(torch.zeros(4), None, 0, False, 0),
            r"compress_int8_quantize: block must be in \[1, 1048576\], got 0",
        ),
        (
            lambda: ops.compress_int8_quantize(torch.zeros(4), torch.zeros(3), 4, False, 0),
            "compress_int8_quantize: the error-feedback buffer has 3 elements, the gradient 4",
        ),
        (
            lambda: ops.compress_topk(torch.zeros(4), torch.zeros(4, dtype=torch.float64), 1),
            "compress_topk: the error-feedback buffer must be float32, got Double",
        ),
        (lambda: ops.compress_topk(torch.zeros(4), None, 5), r"compress_topk: k must be in \[1, 4\], got 5"),
        (lambda: ops.compress_sign(torch.zeros(4, 4).t(), None), "compress_sign: src must be contiguous"),
        (
            lambda: ops.compress_sign_sum(torch.zeros(2, 3, dtype=torch.uint8), torch.zeros(16), 1.0),
            r"compress_sign_sum: the gathered payloads must be \[ranks, 8\] for this output, got \[2, 3\]",
        ),
        (
            lambda: ops.compress_int8_dequantize_sum(torch.zeros(1, 8), torch.zeros(4), 4, 1.0),
            "compress_int8_dequantize_sum: the gathered payloads must be Byte, got Float",
        ),
        (
            lambda: ops.compress_int8_dequantize_sum(
                torch.zeros(9, dtype=torch.uint8)[1:].view(1, 8), torch.zeros(4), 4, 1.0
            ),
            r"compress_int8_dequantize_sum: the gathered payloads must start 4-byte aligned, they start 1 byte",
        ),
        (
            lambda: ops.compress_sign_sum(torch.zeros(18, dtype=torch.uint8)[2:].view(2, 8), torch.zeros(16), 1.0),
            r"compress_sign_sum: the gathered payloads must start 4-byte aligned, they start 2 byte",
        ),
        (
            lambda: ops.compress_multi_tensor_pack([torch.zeros(5)], torch.zeros(4), 1.0, 1.0),
            "compress_multi_tensor_pack: the sources hold more than dst's 4 elements",
        ),
        (
            lambda: ops.compress_multi_tensor_pack([torch.zeros(2)], torch.zeros(4), 1.0, 1.0, torch.zeros(1)),
            "compress_multi_tensor_pack: the clamped counter must be one int64 element, got Float of 1",
        ),
        (
            lambda: ops.compress_multi_tensor_pack([torch.zeros(2)], torch.zeros(4), 1.0, -1.0),
            "compress_multi_tensor_pack: limit must be > 0, got -1",
        ),
        (
            lambda: ops.compress_multi_tensor_unpack(torch.zeros(4), [torch.zeros(4, 4).t()], 1.0),
            "compress_multi_tensor_unpack: each destination must be contiguous",
        ),
    ],
)
def test_bad_arguments(call, message):
    with pytest.raises(RuntimeError, match="fastcomm " + message):
        call()


def test_payload_sizes():
    n = 1000
    assert ops.compress_int8_quantize(torch.zeros(n), None, 64, False, 0).numel() == 4 * math.ceil(n / 64) + n
    assert ops.compress_int8_quantize(torch.zeros(7), None, 4, False, 0).numel() == 16  # 8 + 7, padded
    assert ops.compress_sign(torch.zeros(n), None).numel() == 4 + math.ceil(n / 8) + 3  # padded
    assert ops.compress_sign(torch.zeros(9), None).numel() == 8  # 4 + 2, padded
    assert ops.compress_topk(torch.zeros(n), None, 10).numel() == 20


@pytest.mark.parametrize("rows, cols, r", [(1, 1, 1), (7, 13, 3), (64, 33, 4), (300, 1000, 2), (5, 70001, 1)])
def test_powersgd_products(isa, rows, cols, r):
    """Against float64 products, within float32's forward error bound for a sum:
    |error| <= n * 2^-24 * sum |terms| (n terms; the kernels sum in lanes)."""

    def close(got, want, abs_terms, n):
        bound = n * 2.0**-24 * abs_terms + 1e-30
        assert ((got.double() - want).abs() <= bound).all(), (got.double() - want).abs().max()

    g = torch.Generator().manual_seed(rows * cols)
    m = torch.randn(rows, cols, generator=g)
    q = torch.randn(cols, r, generator=g)
    p = torch.empty(rows, r)
    md, qd = m.double(), q.double()
    ops.compress_powersgd_project(m, q, p)
    close(p, md @ qd, md.abs() @ qd.abs(), cols)
    q_out = torch.empty(cols, r)
    ops.compress_powersgd_back(m, p, q_out)
    pd = p.double()
    close(q_out, md.t() @ pd, md.abs().t() @ pd.abs(), rows)
    approx, error = m.clone(), torch.empty_like(m)
    ops.compress_powersgd_approximate(p, q, approx, error)
    want, terms = pd @ qd.t(), pd.abs() @ qd.abs().t()
    close(approx, want, terms, r)
    close(error, md - want, terms + md.abs(), r + 1)
    approx2 = m.clone()
    ops.compress_powersgd_approximate(p, q, approx2, None)
    assert torch.equal(approx2, approx)


def test_powersgd_products_do_not_depend_on_threads():
    m = torch.randn(513, 2000)
    q = torch.randn(2000, 4)
    before = torch.get_num_threads()
    results = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        p, q_out, approx = torch.empty(513, 4), torch.empty(2000, 4), m.clone()
        ops.compress_powersgd_project(m, q, p)
        ops.compress_powersgd_back(m, p, q_out)
        ops.compress_powersgd_approximate(p, q, approx, None)
        results.append((p, q_out, approx))
    torch.set_num_threads(before)
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_powersgd_products_bad_arguments():
    with pytest.raises(
        RuntimeError,
        match=r"fastcomm compress_powersgd_project: shapes do not match: m \[4, 5\], p \[4, 2\], q \[4, 2\]",
    ):
        ops.compress_powersgd_project(torch.zeros(4, 5), torch.zeros(4, 2), torch.zeros(4, 2))
    with pytest.raises(
        RuntimeError, match="fastcomm compress_powersgd_back: matrices must be contiguous 2-D float32, got Double"
    ):
        ops.compress_powersgd_back(torch.zeros(4, 5, dtype=torch.float64), torch.zeros(4, 2), torch.zeros(5, 2))
