"""Plain torch references of the fastcomm::compress_* operators.

One function per operator, with the operator's arguments and results, written
for clarity (no fused passes). Tests compare the C++ and CUDA kernels against
them on random inputs; they are also a readable statement of each format
(csrc/kernels/compress_format.h). Stochastic rounding is the one thing they do
not reproduce (the kernels' hash is not worth restating here); its tests check
the rounding's properties instead.
"""

from __future__ import annotations

import torch

INT8_MAX = 127


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def scaled_copy(
    src: torch.Tensor, dst_dtype: torch.dtype, scale: float, limit: float = float("inf")
) -> tuple[torch.Tensor, int]:
    """src * scale converted to dst_dtype; finite values beyond +-limit clamped
    to it (inf and NaN pass). Returns (values, how many were clamped)."""
    acc = torch.float64 if torch.float64 in (src.dtype, dst_dtype) else torch.float32
    v = src.to(acc) * scale
    bound = torch.tensor(limit, dtype=acc)
    over = torch.isfinite(v) & (v.abs() > bound)
    v = torch.where(over, torch.copysign(bound, v), v)
    return v.to(dst_dtype), int(over.sum())


def multi_tensor_pack(srcs: list[torch.Tensor], dst: torch.Tensor, scale: float, limit: float = float("inf")) -> int:
    offset, clamped = 0, 0
    for s in srcs:
        values, c = scaled_copy(s.reshape(-1), dst.dtype, scale, limit)
        dst[offset : offset + s.numel()] = values
        offset += s.numel()
        clamped += c
    return clamped


def multi_tensor_unpack(src: torch.Tensor, dsts: list[torch.Tensor], scale: float) -> None:
    offset = 0
    for d in dsts:
        values, _ = scaled_copy(src[offset : offset + d.numel()], d.dtype, scale)
        d.copy_(values.view(d.shape))
        offset += d.numel()


def low_precision_all_reduce(
    inputs: list[torch.Tensor], wire: torch.dtype, scale: float, limit: float
) -> tuple[torch.Tensor, list[int]]:
    """The low-precision all_reduce (the backend's all_reduce_low_precision,
    csrc/core/collective.h LowPrecisionWire) of every rank's `inputs`: each
    rank's values scaled, clamped and rounded to `wire`, summed in float32 in
    rank order, rounded once, widened back; and each rank's clamp count. Also
    compress::low_precision_sum_cpu's definition, with the inputs as its sources."""
    acc, counts = None, []
    for x in inputs:
        sent = torch.empty(x.numel(), dtype=wire)
        counts.append(multi_tensor_pack([x], sent, scale, limit))
        acc = sent.float() if acc is None else acc + sent.float()
    out = torch.empty_like(inputs[0])
    if acc is not None:
        multi_tensor_unpack(acc.to(wire), [out], 1.0)
    return out, counts


def _with_error(src: torch.Tensor, error: torch.Tensor | None) -> torch.Tensor:
    acc = _acc_dtype(src.dtype)
    x = src.reshape(-1).to(acc)
    return x + error.to(acc) if error is not None else x


def _padded(payload: torch.Tensor) -> torch.Tensor:
    """Byte payloads end with zeros up to a multiple of 4 bytes."""
    return torch.cat([payload, torch.zeros(-payload.numel() % 4, dtype=torch.uint8)])


def int8_quantize(src: torch.Tensor, error: torch.Tensor | None, block: int) -> torch.Tensor:
    """Round-to-nearest int8 blocks of x = src + error; error becomes x - dequantized.
    Returns the payload [float32 scales][int8 values][zeros to 4-byte multiple] as uint8."""
    x = _with_error(src, error)
    n = x.numel()
    blocks = (n + block - 1) // block
    padded = torch.zeros(blocks * block, dtype=x.dtype)
    padded[:n] = x
    amax = padded.view(blocks, block).abs().amax(dim=1).to(torch.float32)
    finite = torch.isfinite(amax) & ~padded.view(blocks, block).isnan().any(dim=1)
    safe = torch.where(finite & (amax > 0), amax, torch.ones_like(amax))
    scale = safe / INT8_MAX
    inverse = torch.full_like(safe, INT8_MAX) / safe  # not INT8_MAX / safe: that is reciprocal() * 127
    per_element = torch.arange(n) // block
    q = torch.round(x.to(torch.float32) * inverse[per_element]).clamp(-INT8_MAX, INT8_MAX)
    zero_block = (~finite | (amax == 0))[per_element]
    q = torch.where(zero_block, torch.zeros_like(q), q)
    scale = torch.where(finite & (amax > 0), scale, torch.where(finite, 0.0, float("nan")))
    if error is not None:
        residual = x - (q * scale[per_element].nan_to_num(0.0)).to(x.dtype)
        residual = torch.where(finite[per_element], residual, torch.zeros_like(residual))
        error.copy_(residual.to(torch.float32))
    return _padded(torch.cat([scale.view(torch.uint8), q.to(torch.int8).view(torch.uint8)]))


def int8_dequantize_sum(gathered: torch.Tensor, out: torch.Tensor, block: int, scale: float) -> None:
    n = out.numel()
    blocks = (n + block - 1) // block
    per_element = torch.arange(n) // block
    total = torch.zeros(n, dtype=torch.float32)
    for row in gathered:
        scales = row[: 4 * blocks].view(torch.float32)
        q = row[4 * blocks : 4 * blocks + n].view(torch.int8).to(torch.float32)
        total = total + q * scales[per_element]
    out.copy_((total * scale).view(out.shape))


def _magnitude(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x.isnan(), torch.full_like(x, float("inf")), x.abs())


def topk(src: torch.Tensor, error: torch.Tensor | None, k: int) -> torch.Tensor:
    """The k largest |x| of x = src + error (ties to the lower index), ascending by
    index; error becomes x with those zeroed. Payload: int32 [k values' bits][k indices]."""
    x = src.reshape(-1).to(torch.float32) + (error if error is not None else 0.0)
    mags = _magnitude(x)
    threshold = mags.kthvalue(mags.numel() - k + 1).values
    above = mags > threshold
    equal = mags == threshold
    take = above | (equal & (torch.cumsum(equal, 0) <= k - int(above.sum())))
    indices = take.nonzero().view(-1)
    values = x[indices]
    if error is not None:
        x[indices] = 0.0
        error.copy_(torch.where(torch.isfinite(x), x, torch.zeros_like(x)))
    return torch.cat([values.view(torch.int32), indices.to(torch.int32)])


def topk_sum(gathered: torch.Tensor, out: torch.Tensor, scale: float) -> None:
    k = gathered.shape[1] // 2
    total = torch.zeros(out.numel(), dtype=torch.float32)
    for row in gathered:
        total.index_add_(0, row[k:].long(), row[:k].view(torch.float32))
    out.copy_((total * scale).view(out.shape))


def sign(src: torch.Tensor, error: torch.Tensor | None) -> torch.Tensor:
    """scale = mean |x| (x = src + error, float32), bit = x >= 0; error becomes
    x - scale * sign(x). Payload: [float32 scale][bits, element j at bit j % 8]."""
    x = src.reshape(-1).to(torch.float32) + (error if error is not None else 0.0)
    n = x.numel()
    scale = (x.to(torch.float64).abs().sum() / n).to(torch.float32) if n else torch.tensor(0.0)
    positive = x >= 0
    if error is not None:
        residual = x - torch.where(positive, scale, -scale)
        error.copy_(residual if torch.isfinite(scale) else torch.zeros_like(x))
    padded = torch.zeros((n + 7) // 8 * 8, dtype=torch.uint8)
    padded[:n] = positive.to(torch.uint8)
    weights = (2 ** torch.arange(8)).to(torch.uint8)
    bits = (padded.view(-1, 8) * weights).sum(dim=1).to(torch.uint8)
    return _padded(torch.cat([scale.reshape(1).view(torch.uint8), bits]))


def sign_sum(gathered: torch.Tensor, out: torch.Tensor, scale: float) -> None:
    n = out.numel()
    total = torch.zeros(n, dtype=torch.float32)
    element = torch.arange(n)
    for row in gathered:
        s = row[:4].view(torch.float32)
        bits = (row[4:][element // 8] >> (element % 8).to(torch.uint8)) & 1
        total = total + torch.where(bits.bool(), s, -s)
    out.copy_((total * scale).view(out.shape))
