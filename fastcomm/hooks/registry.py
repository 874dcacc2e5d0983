"""``register(ddp_model, name, process_group=None, **options) -> state``: the
one-line way to put a fastcomm hook on a DistributedDataParallel model."""
from __future__ import annotations

import inspect
from typing import Any, Callable

import torch
import torch.distributed as dist

from fastcomm.hooks.allreduce import allreduce_hook
from fastcomm.hooks.int8 import Int8State, int8_hook
from fastcomm.hooks.low_precision import LowPrecisionState, bf16_hook, fp16_hook
from fastcomm.hooks.powersgd import PowerSGDState, powersgd_hook
from fastcomm.hooks.sign import SignState, sign_hook
from fastcomm.hooks.state import HookState
from fastcomm.hooks.topk import TopKState, topk_hook

# name -> (make the state from (process_group, **options), the hook)
HOOKS: dict[str, tuple[Callable[..., HookState], Callable]] = {
    "allreduce": (HookState, allreduce_hook),
    "fp16": (lambda pg=None: LowPrecisionState(pg, torch.float16), fp16_hook),
    "bf16": (lambda pg=None: LowPrecisionState(pg, torch.bfloat16), bf16_hook),
    "int8": (Int8State, int8_hook),
    "topk": (TopKState, topk_hook),
    "sign": (SignState, sign_hook),
    "powersgd": (PowerSGDState, powersgd_hook),
}
HOOK_NAMES = tuple(HOOKS)


def _option_names(make_state: Callable[..., HookState]) -> list[str]:
    return [p for p in list(inspect.signature(make_state).parameters)[1:]]


def make_state(name: str, process_group: dist.ProcessGroup | None = None, **options: Any) -> HookState:
    """The state of hook `name` with its options checked (ValueError on a bad one)."""
    if name not in HOOKS:
        raise ValueError(f"fastcomm.hooks.register: unknown hook {name!r}; choose one of {', '.join(HOOK_NAMES)}")
    make, _ = HOOKS[name]
    valid = _option_names(make)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"fastcomm.hooks {name}: unknown option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(valid) if valid else 'none'}"
        )
    return make(process_group, **options)


def register(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    name: str,
    process_group: dist.ProcessGroup | None = None,
    **options: Any,
) -> HookState:
    """Register fastcomm's hook `name` (allreduce, fp16, bf16, int8, topk, sign,
    powersgd) on `ddp_model` and return its state (stats(), state_dict()).

    process_group: the group the hook communicates over; None is the default
    group, which must be the DDP model's own. Options are the keyword arguments
    of the hook's state class. They are checked before anything is registered.
    """
    if not isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel):
        raise TypeError(
            f"fastcomm.hooks.register: expected a DistributedDataParallel model, got {type(ddp_model).__name__}"
        )
    state = make_state(name, process_group, **options)
    state.bind(ddp_model)
    ddp_model.register_comm_hook(state, HOOKS[name][1])
    return state
