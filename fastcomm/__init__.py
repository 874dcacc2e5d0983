"""fastcomm: fast data-parallel communication for PyTorch.

``import fastcomm`` registers the ``fastcomm`` torch.distributed backend for CPU
and CUDA tensors, so ``dist.init_process_group("fastcomm")`` works under torchrun
or with an explicit store. Importing does not touch CUDA.
"""

import torch
import torch.distributed as dist

from fastcomm import _torch_check
from fastcomm._version import __version__

# Before _C loads: under another torch its loading fails on an undefined symbol
# or, worse, succeeds; both become one ImportError that names the two torch
# versions and the rebuild.
_torch_check.check_before_load(torch.__version__)
_torch_check.check_built()
try:
    from fastcomm import _C
except ImportError as error:
    raise _torch_check.explain_load_failure(error, torch.__version__) from error

# create_backend stays importable (register_backend below hands it to torch) but
# is not public API: groups are made with dist.init_process_group / new_group.
from fastcomm._backend import BACKEND_NAME, create_backend, enable_ddp_arena, fastcomm_backend  # noqa: E402

__all__ = [
    "BACKEND_NAME",
    "fastcomm_backend",
    "enable_ddp_arena",
    "cuda_kernels_compiled",
    "hooks",
    "nn",
    "sync",
    "__version__",
]


def cuda_kernels_compiled() -> bool:
    """True when this build of fastcomm compiled its CUDA kernels."""
    return _C.cuda_kernels_compiled()


from fastcomm import hooks, nn, sync  # noqa: E402  (DDP hooks, SyncBatchNorm, model sync: they need _C's operators)

if BACKEND_NAME.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND_NAME, create_backend, extended_api=True, devices=["cpu", "cuda"])
