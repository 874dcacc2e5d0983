"""fastcomm.nn.SyncBatchNorm: batch norm with statistics synchronized over a
process group, on CPU and CUDA, with one collective per forward and one per
backward (see _syncbn_function.py).

It mirrors torch.nn.SyncBatchNorm's constructor, behaviour and errors, and is
not a subclass of it on purpose: DistributedDataParallel refuses
torch.nn.SyncBatchNorm layers in CPU modules, and this class exists to work there.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from fastcomm import _C
from fastcomm._compat import batchnorm_has_bias_switch
from fastcomm.nn._syncbn_function import SyncBatchNormFunction


class SyncBatchNorm(nn.modules.batchnorm._BatchNorm):
    r"""Batch normalization over an (N, C, \*) input whose statistics cover the
    batches of every rank of ``process_group`` (default: the whole world) in
    training mode.

    Arguments are torch.nn.SyncBatchNorm's. Eval mode with running statistics
    uses them and communicates nothing; without running statistics it uses this
    rank's batch alone, as torch does. Without an initialized default group, or
    in a group of one, it is plain batch norm (with fastcomm's kernels).
    """

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        process_group: Any | None = None,
        device=None,
        dtype=None,
        *,
        bias: bool = True,
    ) -> None:
        switches = {"bias": bias} if batchnorm_has_bias_switch else {}
        if affine and not bias and not batchnorm_has_bias_switch:
            raise TypeError(
                f"SyncBatchNorm: bias=False needs a torch whose BatchNorm takes it (torch {torch.__version__} has none)"
            )
        super().__init__(
            num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype, **switches
        )
        self.process_group = process_group

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")

    def _sync_group(self):
        """The group to synchronize over, or None when this process is alone."""
        if not (dist.is_available() and dist.is_initialized()):
            return None
        group = self.process_group if self.process_group is not None else dist.group.WORLD
        return group if dist.get_world_size(group) > 1 else None

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Normalizes ``input`` of shape (N, C, ...). In training mode the
        statistics cover every rank's batch: one all_reduce in forward and, when
        the input needs a gradient, one in backward; a rank whose batch is empty
        still takes part. Raises before any communication where torch would
        (fewer than 2 dimensions, zero channels, a channel count that does not
        match)."""
        self._check_input_dim(input)
        if input.size(1) == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")
        # Running-statistics bookkeeping exactly as torch's _BatchNorm.forward.
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / self.num_batches_tracked.item()
        if not self.training:  # eval: running statistics, or (untracked) this rank's batch alone; no communication
            batch_stats = self.running_mean is None and self.running_var is None
            return F.batch_norm(
                input, self.running_mean, self.running_var, self.weight, self.bias, batch_stats, factor, self.eps
            )
        running_mean = self.running_mean if self.track_running_stats else None
        running_var = self.running_var if self.track_running_stats else None
        self._check_channels(input, running_mean, running_var)
        if input.is_cuda and not _C.cuda_kernels_compiled():
            raise RuntimeError(
                "fastcomm SyncBatchNorm: the input is a CUDA tensor but this build of fastcomm has no CUDA kernels "
                "(rebuild with a CUDA torch and nvcc, FASTCOMM_CUDA=1)"
            )
        return SyncBatchNormFunction.apply(
            input, self.weight, self.bias, running_mean, running_var, self.eps, factor, self._sync_group()
        )

    def _check_channels(self, input, running_mean, running_var) -> None:
        """torch's errors for a channel count that does not match, raised before any communication."""
        channels = input.size(1)
        for name, t in (
            ("running_mean", running_mean),
            ("running_var", running_var),
            ("weight", self.weight),
            ("bias", self.bias),
        ):
            if t is not None and t.numel() != channels:
                raise RuntimeError(f"{name} should contain {channels} elements not {t.numel()}")

    @classmethod
    def convert_sync_batchnorm(cls, module: nn.Module, process_group: Any | None = None) -> nn.Module:
        """Replaces every BatchNorm*d (and torch.nn.SyncBatchNorm) in ``module`` by
        fastcomm.nn.SyncBatchNorm, sharing its parameters and buffers, as
        torch.nn.SyncBatchNorm.convert_sync_batchnorm does. Returns the module, or
        the new layer when ``module`` itself is a batch norm."""
        converted = module
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and not isinstance(module, cls):
            converted = cls(
                module.num_features,
                module.eps,
                module.momentum,
                module.affine,
                module.track_running_stats,
                process_group,
                bias=module.bias is not None,
            )
            if module.affine:
                with torch.no_grad():
                    converted.weight = module.weight
                    converted.bias = module.bias
            converted.running_mean = module.running_mean
            converted.running_var = module.running_var
            converted.num_batches_tracked = module.num_batches_tracked
            converted.training = module.training
            if hasattr(module, "qconfig"):
                converted.qconfig = module.qconfig
        for name, child in module.named_children():
            converted.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return converted
