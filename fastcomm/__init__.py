"""fastcomm: fast data-parallel communication for PyTorch.

``import fastcomm`` registers the ``fastcomm`` torch.distributed backend for CPU
and CUDA tensors, so ``dist.init_process_group("fastcomm")`` works under torchrun
or with an explicit store. Importing does not touch CUDA.
"""
import torch
import torch.distributed as dist

from fastcomm import _C
from fastcomm._backend import BACKEND_NAME, create_backend, fastcomm_backend

__version__ = "0.1.0"

__all__ = ["BACKEND_NAME", "create_backend", "fastcomm_backend", "cuda_kernels_compiled", "hooks", "nn", "sync", "__version__"]


def cuda_kernels_compiled() -> bool:
    """True when this build of fastcomm compiled its CUDA kernels."""
    return _C.cuda_kernels_compiled()


from fastcomm import hooks, nn, sync  # noqa: E402  (DDP hooks, SyncBatchNorm, model sync: they need _C's operators)

if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, create_backend, extended_api=True, devices=["cpu", "cuda"])
