"""DDP communication hooks on fastcomm's fused compression kernels.

    state = fastcomm.hooks.register(ddp_model, "powersgd", matrix_approximation_rank=4)
    ...
    print(state.stats())   # {"steps", "raw_bytes", "wire_bytes", "compression_ratio", ...}

or with a state made beforehand, checked against the hook when registered:
``fastcomm.hooks.register(ddp_model, "powersgd", state=fastcomm.hooks.PowerSGDState(group, 4))``;
or torch-style, checked at the first backward:
``ddp_model.register_comm_hook(fastcomm.hooks.PowerSGDState(), fastcomm.hooks.powersgd_hook)``.
PowerSGDState takes torch's PowerSGDState's arguments, with its defaults.
The hooks work on any process group (gloo, nccl, fastcomm) and on CPU and
CUDA buckets. The kernels are the fastcomm::compress_* torch operators; their
plain torch references are in fastcomm.hooks.reference.
"""

from fastcomm.hooks.allreduce import allreduce_hook
from fastcomm.hooks.int8 import Int8State, int8_hook
from fastcomm.hooks.low_precision import LowPrecisionState, bf16_hook, fp16_hook
from fastcomm.hooks.powersgd import PowerSGDState, powersgd_hook
from fastcomm.hooks.registry import HOOK_NAMES, make_state, register
from fastcomm.hooks.sign import SignState, sign_hook
from fastcomm.hooks.state import HookState
from fastcomm.hooks.topk import TopKState, topk_hook

__all__ = [
    "HOOK_NAMES",
    "HookState",
    "Int8State",
    "LowPrecisionState",
    "PowerSGDState",
    "SignState",
    "TopKState",
    "allreduce_hook",
    "bf16_hook",
    "fp16_hook",
    "int8_hook",
    "make_state",
    "powersgd_hook",
    "register",
    "sign_hook",
    "topk_hook",
]
