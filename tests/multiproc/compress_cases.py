"""Checks of the fastcomm::compress_* operators against fastcomm.hooks.reference,
shared by tests/unit (CPU) and tests/gpu (CUDA): each takes the device the
operator runs on; the reference always runs on CPU."""

from __future__ import annotations

import torch

from fastcomm.hooks import reference

ops = torch.ops.fastcomm

# Awkward sizes: one element, less than a byte of sign bits, not a multiple of
# the int8 block, and more than one parallel task (2^15 elements).
SIZES = [1, 7, 255, 1000, 70001]
DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16]


def gradient(n: int, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g, dtype=torch.float64) * torch.rand(n, generator=g, dtype=torch.float64) * 4
    return x.to(dtype)


def error_buffer(n: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * 0.1


def check_pack_unpack(device, dtype, dst_dtype, limit, sizes=(3, 70001, 1, 255)):
    srcs = [gradient(n, dtype, seed=i) for i, n in enumerate(sizes)]
    srcs[0][0] = float("inf")  # passes through unchanged
    srcs[1][5] = -1000.0  # beyond the limit 100 (after scaling by 0.25): clamped, counted
    total = sum(sizes)
    dst = torch.full((total + 5,), 7.0, dtype=dst_dtype, device=device)
    counter = torch.zeros(1, dtype=torch.long, device=device)
    ops.compress_multi_tensor_pack([s.to(device) for s in srcs], dst, 0.25, limit, counter)
    expected = torch.full((total + 5,), 7.0, dtype=dst_dtype)
    clamped = reference.multi_tensor_pack(srcs, expected, 0.25, limit)
    assert torch.equal(dst.cpu(), expected)
    assert int(counter) == clamped == (1 if limit == 100.0 else 0)
    if limit == 100.0:
        assert dst[3 + 5].item() == -100.0

    outs = [torch.empty(n, dtype=dtype, device=device) for n in sizes]
    ops.compress_multi_tensor_unpack(dst, outs, 2.0)
    expected_outs = [torch.empty(n, dtype=dtype) for n in sizes]
    reference.multi_tensor_unpack(expected, expected_outs, 2.0)
    for got, want in zip(outs, expected_outs):
        assert torch.equal(got.cpu(), want)


def check_int8(device, n, dtype, block, with_error):
    src = gradient(n, dtype)
    err = error_buffer(n) if with_error else None
    err_dev = err.to(device, copy=True) if with_error else None
    payload = ops.compress_int8_quantize(src.to(device), err_dev, block, False, 0)
    expected = reference.int8_quantize(src, err, block)
    assert torch.equal(payload.cpu(), expected)
    if with_error:
        torch.testing.assert_close(err_dev.cpu(), err, rtol=0, atol=1e-6)
    # Sum of three ranks' payloads, scaled.
    others = [reference.int8_quantize(gradient(n, dtype, seed=s), None, block) for s in (5, 6)]
    gathered = torch.stack([expected] + others)
    out = torch.empty(n, dtype=dtype, device=device)
    ops.compress_int8_dequantize_sum(gathered.to(device), out, block, 1 / 3)
    want = torch.empty(n, dtype=dtype)
    reference.int8_dequantize_sum(gathered, want, block, 1 / 3)
    assert torch.equal(out.cpu(), want)
    return payload


def check_topk(device, n, dtype, k, with_error):
    src = gradient(n, dtype)
    if n > 10:
        src[3] = src[9] = src[10] = 50.0  # ties at the top
    err = error_buffer(n) if with_error else None
    err_dev = err.to(device, copy=True) if with_error else None
    payload = ops.compress_topk(src.to(device), err_dev, k)
    expected = reference.topk(src, err, k)
    assert torch.equal(payload.cpu(), expected)
    if with_error:
        assert torch.equal(err_dev.cpu(), err)
    other = reference.topk(gradient(n, dtype, seed=9), None, k)
    gathered = torch.stack([expected, other])
    out = torch.empty(n, dtype=dtype, device=device)
    ops.compress_topk_sum(gathered.to(device), out, 0.5)
    want = torch.empty(n, dtype=dtype)
    reference.topk_sum(gathered, want, 0.5)
    assert torch.equal(out.cpu(), want)


def check_sign(device, n, dtype, with_error):
    src = gradient(n, dtype)
    err = error_buffer(n) if with_error else None
    err_dev = err.to(device, copy=True) if with_error else None
    payload = ops.compress_sign(src.to(device), err_dev)
    expected = reference.sign(src, err)
    assert torch.equal(payload.cpu()[4:], expected[4:])  # the bits
    got_scale, want_scale = payload.cpu()[:4].view(torch.float32), expected[:4].view(torch.float32)
    torch.testing.assert_close(got_scale, want_scale, rtol=1e-6, atol=0)
    if with_error:
        torch.testing.assert_close(err_dev.cpu(), err, rtol=0, atol=1e-5)
    other = reference.sign(gradient(n, dtype, seed=4), None)
    gathered = torch.stack([payload.cpu(), other])
    out = torch.empty(n, dtype=dtype, device=device)
    ops.compress_sign_sum(gathered.to(device), out, 0.5)
    want = torch.empty(n, dtype=dtype)
    reference.sign_sum(gathered, want, 0.5)
    assert torch.equal(out.cpu(), want)
