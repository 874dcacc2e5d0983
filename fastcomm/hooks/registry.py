"""``register(ddp_model, name, process_group=None, *, state=None, **options) -> state``:
the one-line way to put a fastcomm hook on a DistributedDataParallel model."""

from __future__ import annotations

import inspect
import logging
import os
from typing import Any, Callable, NamedTuple

import torch
import torch.distributed as dist

from fastcomm.hooks import _options
from fastcomm.hooks.allreduce import allreduce_hook
from fastcomm.hooks.int8 import Int8State, int8_hook
from fastcomm.hooks.low_precision import LowPrecisionState, bf16_hook, check_low_precision_state, fp16_hook
from fastcomm.hooks.powersgd import PowerSGDState, powersgd_hook
from fastcomm.hooks.sign import SignState, sign_hook
from fastcomm.hooks.state import HookState, check_state
from fastcomm.hooks.topk import TopKState, topk_hook

_log = logging.getLogger(__name__)


class Hook(NamedTuple):
    make_state: Callable[..., HookState]  # (process_group, **options) -> a state
    hook: Callable
    check_state: Callable[[object], None]  # TypeError naming the hook unless the state is the hook's


def _hook(name: str, state_class: type[HookState], hook: Callable) -> Hook:
    return Hook(state_class, hook, lambda state: check_state(name, state, state_class))


def _check_state_is_hooks(name: str, state: HookState) -> None:
    """Every state is a HookState (the allreduce hook's type): its hook_name
    tells whose it is, so register(ddp, "allreduce", state=PowerSGDState())
    is refused too."""
    HOOKS[name].check_state(state)
    if state.hook_name != name:
        raise TypeError(
            f"fastcomm.hooks.register: the state is the {state.hook_name} hook's "
            f"({type(state).__qualname__}), not the {name} hook's"
        )


HOOKS: dict[str, Hook] = {
    "allreduce": _hook("allreduce", HookState, allreduce_hook),
    "fp16": Hook(
        lambda pg=None: LowPrecisionState(pg, torch.float16),
        fp16_hook,
        lambda state: check_low_precision_state("fp16", state, torch.float16),
    ),
    "bf16": Hook(
        lambda pg=None: LowPrecisionState(pg, torch.bfloat16),
        bf16_hook,
        lambda state: check_low_precision_state("bf16", state, torch.bfloat16),
    ),
    "int8": _hook("int8", Int8State, int8_hook),
    "topk": _hook("topk", TopKState, topk_hook),
    "sign": _hook("sign", SignState, sign_hook),
    "powersgd": _hook("powersgd", PowerSGDState, powersgd_hook),
}
HOOK_NAMES = tuple(HOOKS)
"""The names `register` and `make_state` take, in the order of the docs' table."""
# Hooks that hand DDP's bucket itself to a collective (the gather hooks send a
# compressed copy): they gain from DDP's buckets in fastcomm's arena.
_BUCKET_IN_PLACE = {"allreduce", "fp16", "bf16", "powersgd"}


def _option_names(make_state: Callable[..., HookState]) -> list[str]:
    return list(inspect.signature(make_state).parameters)[1:]


def _renamed_options(make_state: Callable[..., HookState]) -> dict[str, str]:
    init = make_state.__init__ if isinstance(make_state, type) else make_state
    return getattr(init, "renamed", {})


def _make_state(
    name: str, process_group: dist.ProcessGroup | None, options: dict[str, Any], stacklevel: int
) -> HookState:
    """make_state() for callers `stacklevel` frames above this function's caller."""
    if name not in HOOKS:
        raise ValueError(f"fastcomm.hooks.register: unknown hook {name!r}; choose one of {', '.join(HOOK_NAMES)}")
    make = HOOKS[name].make_state
    options = _options.rename_options(
        f"fastcomm.hooks {name}", _renamed_options(make), options, stacklevel=stacklevel + 1
    )
    valid = _option_names(make)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ValueError(
            f"fastcomm.hooks {name}: unknown option(s) {', '.join(unknown)}; "
            f"valid: {', '.join(valid) if valid else 'none'}"
        )
    return make(process_group, **options)


def make_state(name: str, process_group: dist.ProcessGroup | None = None, **options: Any) -> HookState:
    """The state of hook `name` with its options checked (ValueError on a bad one)."""
    return _make_state(name, process_group, options, stacklevel=2)


def register(
    ddp_model: torch.nn.parallel.DistributedDataParallel,
    name: str,
    process_group: dist.ProcessGroup | None = None,
    *,
    state: HookState | None = None,
    **options: Any,
) -> HookState:
    """Register fastcomm's hook `name` (allreduce, fp16, bf16, int8, topk, sign,
    powersgd) on `ddp_model` and return its state (stats(), state_dict()).

    process_group: the group the hook communicates over; None is the default
    group, which must be the DDP model's own. Options are the keyword arguments
    of the hook's state class. They are checked before anything is registered.

    state: a state made beforehand (then neither process_group nor options);
    TypeError, before anything is registered, unless it is the hook's own kind
    (the bf16 hook needs a bfloat16 LowPrecisionState, powersgd a PowerSGDState).
    """
    if not isinstance(ddp_model, torch.nn.parallel.DistributedDataParallel):
        raise TypeError(
            f"fastcomm.hooks.register: expected a DistributedDataParallel model, got {type(ddp_model).__name__}"
        )
    if state is None:
        state = _make_state(name, process_group, options, stacklevel=2)
    else:
        if process_group is not None or options:
            given = ["process_group"] * (process_group is not None) + sorted(options)
            raise TypeError(
                f"fastcomm.hooks.register: got state= and {', '.join(given)}; "
                "the state already holds its group and options"
            )
        if name not in HOOKS:
            raise ValueError(f"fastcomm.hooks.register: unknown hook {name!r}; choose one of {', '.join(HOOK_NAMES)}")
        _check_state_is_hooks(name, state)
    state.bind(ddp_model)
    ddp_model.register_comm_hook(state, HOOKS[name].hook)
    _suggest_fast_path(ddp_model, name, state)
    return state


def _suggest_fast_path(ddp_model: torch.nn.parallel.DistributedDataParallel, name: str, state: HookState) -> None:
    """One INFO line naming the settings of docs/training.md this model lacks (a
    log record, not a warning: nothing is printed unless logging is configured)."""
    hints = []
    if not getattr(ddp_model, "gradient_as_bucket_view", True):
        hints.append(
            "DistributedDataParallel(..., gradient_as_bucket_view=True) (no copies of the gradients "
            "into DDP's buckets and back)"
        )
    if (
        name in _BUCKET_IN_PLACE
        and getattr(ddp_model, "device_type", None) == "cpu"
        and not _ddp_arena_enabled()
        and _has_arena(state)
    ):
        hints.append(
            "fastcomm.enable_ddp_arena() before building the DDP model (the ranks of a host sum the buckets in place)"
        )
    if hints:
        _log.info("fastcomm.hooks.register: for faster steps, %s; docs/training.md", "; ".join(hints))


def _ddp_arena_enabled() -> bool:
    """torch's reducer reads DDP_DISABLE_COMM_MEM when it lays out buckets: any
    value but "1" (its default) asks the group's backend for bucket memory."""
    return os.environ.get("DDP_DISABLE_COMM_MEM", "1") != "1"


def _has_arena(state: HookState) -> bool:
    backend = state.fastcomm_backend(torch.device("cpu"))
    return backend is not None and backend.arena_stats() is not None
