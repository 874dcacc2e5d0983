"""The autograd function behind fastcomm.nn.SyncBatchNorm: fused kernels around
exactly one collective in forward and one in backward.

forward:  local Welford stats (one pass) -> all_reduce of 1 + 2C float64 values
          -> global mean/invstd and running-stat update -> fused normalize + affine
backward: local sum(dy), sum(dy * (x - mean)) (one pass; also the weight and
          bias gradients) -> all_reduce of 2C float64 values -> fused input gradient

The packed buffers are described in csrc/kernels/syncbn_math.h. A rank with no
samples contributes zeros and still joins both collectives, so peers never hang.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

_ops = torch.ops.fastcomm


def _stats_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_enough_values(input: torch.Tensor, packed: torch.Tensor, communicates: bool) -> None:
    """torch's check, over the whole group: more than one value per channel in total.

    Reading the global count (packed[0]) waits for the device, so it is read only
    when the local count cannot settle the question; every rank with a local count
    of one or less reads it, so all ranks raise together when the total is too small.
    """
    local = input.numel() // input.size(1)
    if local > 1:
        return
    total = packed[0].item() if communicates else local
    if total <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {input.size()}")


class SyncBatchNormFunction(torch.autograd.Function):
    """Batch norm with statistics over `process_group` (None: this process alone).

    Returns the normalized input; weight and bias gradients are this rank's own
    (DDP averages them like any gradient), the input gradient uses the group's sums.
    """

    @staticmethod
    def forward(ctx, input, weight, bias, running_mean, running_var, eps: float, momentum: float, process_group):
        packed = _ops.syncbn_local_stats(input)
        if process_group is not None:
            dist.all_reduce(packed, group=process_group)
        _check_enough_values(input, packed, process_group is not None)
        mean, invstd = _ops.syncbn_finalize_stats(
            packed, eps, momentum, running_mean, running_var, _stats_dtype(input.dtype)
        )
        ctx.save_for_backward(input, weight, mean, invstd, packed)
        ctx.process_group = process_group
        ctx.bias_dtype = bias.dtype if bias is not None else None
        return _ops.syncbn_normalize(input, mean, invstd, weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        input, weight, mean, invstd, packed = ctx.saved_tensors
        needs_input, needs_weight, needs_bias = ctx.needs_input_grad[:3]
        channels = input.size(1)
        sums = _ops.syncbn_grad_sums(grad_output, input, mean)  # this rank's [sum(dy), sum(dy * (x - mean))]
        grad_weight = grad_bias = grad_input = None
        # Taken (as copies) before the all_reduce below overwrites `sums`.
        if needs_weight and weight is not None:
            grad_weight = (sums[channels:] * invstd).to(weight.dtype)
        if needs_bias and ctx.bias_dtype is not None:
            grad_bias = sums[:channels].to(ctx.bias_dtype, copy=True)
        if needs_input:
            if ctx.process_group is not None:
                dist.all_reduce(sums, group=ctx.process_group)
            grad_input = _ops.syncbn_grad_input(grad_output, input, mean, invstd, weight, sums, packed)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None
