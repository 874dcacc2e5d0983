"""torch.nn.SyncBatchNorm's algorithm on CPU: the peer of fastcomm.nn.SyncBatchNorm
in benchmarks/syncbn_vs_torch.py.

torch's own SyncBatchNorm refuses CPU tensors, and the five native kernels its
autograd function calls (batch_norm_stats, batch_norm_gather_stats_with_counts,
batch_norm_elemt, batch_norm_backward_reduce, batch_norm_backward_elemt) exist
only for GPUs. This module runs the same algorithm (torch/nn/modules/_functions.py)
with each of those kernels written as the torch CPU ops a user would write:
forward all_gather of [mean, invstd, count] per rank, the masking of empty ranks
(a host sync), the combination, elementwise normalize; backward reduce, one
all_reduce of [sum_dy, sum_dy_xmu], elementwise input gradient.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


def _reduce_dims(x: torch.Tensor) -> list[int]:
    return [0] + list(range(2, x.dim()))


def _channel_view(t: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return t.view([1, -1] + [1] * (x.dim() - 2))


def batch_norm_stats(x, eps):
    # float32 statistics for half inputs, as torch's kernel (here an upcast copy: no CPU op reduces bf16 into float)
    stats_input = x if x.dtype == torch.float64 else x.float()
    var, mean = torch.var_mean(stats_input, _reduce_dims(x), correction=0)
    return mean, torch.rsqrt(var + eps)


def batch_norm_gather_stats_with_counts(mean_all, invstd_all, running_mean, running_var, momentum, eps, counts):
    counts = counts.view(-1, 1)
    total = counts.sum()
    mean = (mean_all * counts).sum(0) / total
    var_all = invstd_all.pow(-2) - eps
    var = ((var_all + (mean_all - mean).square()) * counts).sum(0) / total
    if running_mean is not None:
        running_mean.mul_(1 - momentum).add_(mean, alpha=momentum)
        running_var.mul_(1 - momentum).add_(var * (total / (total - 1)), alpha=momentum)
    return mean, torch.rsqrt(var + eps)


def batch_norm_elemt(x, weight, bias, mean, invstd, eps):
    # torch's fused CPU batch norm in inference form is exactly this elementwise pass
    return F.batch_norm(x, mean, invstd.pow(-2) - eps, weight, bias, False, 0.0, eps)


def batch_norm_backward_reduce(dy, x, mean, invstd):
    dims = _reduce_dims(x)
    sum_dy = dy.sum(dims)
    sum_dy_xmu = (dy * (x - _channel_view(mean, x))).sum(dims)
    return sum_dy, sum_dy_xmu, sum_dy_xmu * invstd, sum_dy


def batch_norm_backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count):
    n = count.sum()
    w = weight if weight is not None else torch.ones_like(invstd)
    xhat_coeff = invstd.square() * sum_dy_xmu / n
    dx = (
        dy - _channel_view(sum_dy / n, x) - (x - _channel_view(mean, x)) * _channel_view(xhat_coeff, x)
    ) * _channel_view(invstd * w, x)
    return dx.to(dy.dtype)


class _TorchAlgorithmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum, group, world_size):
        x = x.contiguous()
        c = x.size(1)
        if x.numel() > 0:
            mean, invstd = batch_norm_stats(x, eps)
            count = torch.full((1,), x.numel() // c, dtype=mean.dtype)
            combined = torch.cat([mean, invstd, count])
        else:
            combined = torch.zeros(2 * c + 1, dtype=torch.float64 if x.dtype == torch.float64 else torch.float32)
        gathered = torch.empty(world_size * combined.numel(), dtype=combined.dtype)
        if group is not None:
            dist.all_gather_single(gathered, combined, group)
        else:  # compute only (the benchmark's local column): this rank's statistics alone
            gathered.copy_(combined)
        mean_all, invstd_all, count_all = torch.split(gathered.view(world_size, -1), c, dim=1)
        mask = count_all.squeeze(-1) >= 1  # host sync, as torch does
        mean_all, invstd_all, count_all = mean_all[mask], invstd_all[mask], count_all[mask]
        mean, invstd = batch_norm_gather_stats_with_counts(
            mean_all, invstd_all, running_mean, running_var, momentum, eps, count_all.view(-1)
        )
        ctx.save_for_backward(x, weight, mean, invstd, count_all)
        ctx.group = group
        return batch_norm_elemt(x, weight, bias, mean, invstd, eps)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, invstd, count_all = ctx.saved_tensors
        dy = dy.contiguous()
        sum_dy, sum_dy_xmu, grad_weight, grad_bias = batch_norm_backward_reduce(dy, x, mean, invstd)
        combined = torch.cat([sum_dy, sum_dy_xmu])
        if ctx.group is not None:
            dist.all_reduce(combined, group=ctx.group)
        sum_dy, sum_dy_xmu = torch.split(combined, x.size(1))
        grad_input = batch_norm_backward_elemt(dy, x, mean, invstd, weight, sum_dy, sum_dy_xmu, count_all)
        return grad_input, grad_weight, grad_bias, None, None, None, None, None, None


class TorchAlgorithmSyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    """Training-mode SyncBatchNorm over the world, torch's algorithm on CPU (benchmark peer only).
    communicate=False skips the two collectives (this rank's statistics alone)."""

    def __init__(self, num_features: int, communicate: bool = True) -> None:
        super().__init__(num_features)
        self.communicate = communicate

    def _check_input_dim(self, input):
        pass

    def forward(self, x):
        self.num_batches_tracked.add_(1)
        group, world_size = (dist.group.WORLD, dist.get_world_size()) if self.communicate else (None, 1)
        return _TorchAlgorithmFunction.apply(
            x, self.weight, self.bias, self.running_mean, self.running_var, self.eps, self.momentum, group, world_size
        )
