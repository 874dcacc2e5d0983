"""References for fastcomm.nn.SyncBatchNorm tests: torch's nn.BatchNorm*d run in
one process on the concatenated global batch, in float64 on the same input
values (the exact answer to float32 precision: torch's own float32 batch norm is
off by more than 1e-5 in weight gradients summed over ~1e4 elements), and the
tolerances per dtype."""

from __future__ import annotations

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}

# (rtol, atol) against the float64 reference. float32: 1e-5; half types: one
# rounding step of the output format.
TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-10, 1e-10),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (2e-3, 2e-3),
}


def batchnorm_class(input_dim: int) -> type[nn.Module]:
    return {2: nn.BatchNorm1d, 3: nn.BatchNorm1d, 4: nn.BatchNorm2d, 5: nn.BatchNorm3d}[input_dim]


def memory_format(input_dim: int, channels_last: bool) -> torch.memory_format:
    if not channels_last:
        return torch.contiguous_format
    return {4: torch.channels_last, 5: torch.channels_last_3d}[input_dim]


def global_batch(batch: int, feature_shape: tuple, dtype: torch.dtype, seed: int, channels_last: bool = False):
    """Input and output gradient of the global batch: x ~ 3 N(0, 1) + 1.5 (a mean the statistics must remove)."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(batch, *feature_shape, generator=g, dtype=torch.float64) * 3 + 1.5).to(dtype)
    dy = torch.randn(batch, *feature_shape, generator=g, dtype=torch.float64).to(dtype)
    fmt = memory_format(x.dim(), channels_last)
    return x.contiguous(memory_format=fmt), dy.contiguous(memory_format=fmt)


def init_affine(module: nn.Module) -> None:
    """Distinct, deterministic weight and bias values per channel."""
    with torch.no_grad():
        if module.weight is not None:
            module.weight.copy_(torch.linspace(0.5, 1.5, module.num_features, dtype=module.weight.dtype))
        if module.bias is not None:
            module.bias.copy_(torch.linspace(-0.3, 0.4, module.num_features, dtype=module.bias.dtype))


def forward_backward(module: nn.Module, x: torch.Tensor, dy: torch.Tensor):
    """Output and input gradient of module(x) with output gradient dy."""
    x = x.detach().clone().requires_grad_()
    y = module(x)
    y.backward(dy)
    return y.detach(), x.grad


def assert_close(actual, expected, dtype, what: str) -> None:
    """actual (computed in `dtype`) against the float64 reference."""
    rtol, atol = TOLERANCES[dtype]
    torch.testing.assert_close(
        actual.double(), expected.double(), rtol=rtol, atol=atol, msg=lambda m: f"{what} ({dtype}): {m}"
    )
