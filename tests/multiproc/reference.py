"""Exact inputs and references for collective checks.

Inputs are small integers (1..3, or alternating bools), so sums and products of
up to 3 ranks are exact in every dtype, including float16, bfloat16 and int8;
references are computed in float64/int64 and cast once.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
]

R = dist.ReduceOp


def ops_for(dtype: torch.dtype) -> list:
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    if dtype != torch.bool:
        ops.append(R.AVG)
    if not dtype.is_floating_point:
        ops += [R.BAND, R.BOR, R.BXOR]
    return ops


def rank_input(rank: int, shape, dtype: torch.dtype, salt: int = 0) -> torch.Tensor:
    """Deterministic per-rank data: small integers, different on every rank."""
    numel = 1
    for s in shape:
        numel *= s
    base = torch.arange(numel, dtype=torch.int64) + rank * 7 + salt
    if dtype == torch.bool:
        return (base % 2 == 0).reshape(shape)
    return (base % 3 + 1).to(dtype).reshape(shape)


def reduce_reference(tensors: list[torch.Tensor], op, dtype: torch.dtype) -> torch.Tensor:
    n = len(tensors)
    wide = torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([t.to(wide) for t in tensors])
    if op == R.SUM:
        out = stack.sum(0)
        if dtype == torch.bool:
            out = out != 0
    elif op == R.AVG:
        total = stack.sum(0)
        out = total / n if dtype.is_floating_point else torch.div(total, n, rounding_mode="trunc")
    elif op == R.PRODUCT:
        out = stack.prod(0)
    elif op == R.MIN:
        out = stack.min(0).values
    elif op == R.MAX:
        out = stack.max(0).values
    else:
        fn = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or, R.BXOR: torch.bitwise_xor}[op]
        out = tensors[0].clone()
        for t in tensors[1:]:
            out = fn(out, t)
        return out
    return out.to(dtype)


def assert_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    if not torch.equal(actual, expected):
        raise AssertionError(
            f"{what}: values differ\nactual={actual.flatten()[:16]}\nexpected={expected.flatten()[:16]}"
        )


def assert_ranks_identical(model: torch.nn.Module, world_size: int, what: str, group=None) -> None:
    """Every rank of `group` holds bitwise the same parameters, and they are finite."""
    flat = torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])
    parts = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(parts, flat, group=group)
    for r, part in enumerate(parts):
        assert torch.equal(part, flat), f"{what}: rank {r}'s parameters differ"
    assert torch.isfinite(flat).all(), f"{what}: non-finite parameters"
