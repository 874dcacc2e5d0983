"""A hook handed a state that is not its own (another hook's, torch's, or no
hook state at all) raises a TypeError naming the hook, the state it needs and
the one it got: at registration through fastcomm.hooks.register(..., state=),
at its first call (before any collective, on every rank alike) through torch's
register_comm_hook."""

from __future__ import annotations

import re

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import fastcomm.hooks as hooks


def _needs(hook: str, expected: str, got: str) -> str:
    return (
        f"fastcomm.hooks {hook}: the state must be a fastcomm.hooks.{expected}, got {got} "
        f"(fastcomm.hooks.register(ddp_model, '{hook}') makes the right one)"
    )


def wrong_state_is_named(rank: int, world_size: int) -> None:
    """Another hook's state, torch's PowerSGDState, a plain object or None: each
    hook refuses it at the first backward; the right state works afterwards."""
    import pytest

    cases = [
        (
            hooks.fp16_hook,
            hooks.PowerSGDState(),
            _needs("fp16", "LowPrecisionState", "fastcomm.hooks.powersgd.PowerSGDState"),
        ),
        (hooks.fp16_hook, object(), _needs("fp16", "LowPrecisionState", "builtins.object")),
        (
            hooks.bf16_hook,
            hooks.LowPrecisionState(dtype=torch.float16),
            "fastcomm.hooks bf16: the state is the fp16 hook's (dtype torch.float16); "
            "bf16_hook needs LowPrecisionState(dtype=torch.bfloat16)",
        ),
        (
            hooks.fp16_hook,
            hooks.LowPrecisionState(dtype=torch.bfloat16),
            "fastcomm.hooks fp16: the state is the bf16 hook's (dtype torch.bfloat16); "
            "fp16_hook needs LowPrecisionState(dtype=torch.float16)",
        ),
        (hooks.int8_hook, hooks.TopKState(), _needs("int8", "Int8State", "fastcomm.hooks.topk.TopKState")),
        (hooks.topk_hook, hooks.SignState(), _needs("topk", "TopKState", "fastcomm.hooks.sign.SignState")),
        (hooks.sign_hook, hooks.Int8State(), _needs("sign", "SignState", "fastcomm.hooks.int8.Int8State")),
        (hooks.powersgd_hook, hooks.HookState(), _needs("powersgd", "PowerSGDState", "fastcomm.hooks.state.HookState")),
        (
            hooks.powersgd_hook,
            torch_powersgd.PowerSGDState(None),
            _needs("powersgd", "PowerSGDState", f"{torch_powersgd.__name__}.PowerSGDState"),
        ),
        (hooks.allreduce_hook, None, _needs("allreduce", "HookState", "builtins.NoneType")),
    ]
    for hook, state, message in cases:
        torch.manual_seed(0)
        ddp = DDP(nn.Linear(6, 3))
        ddp.register_comm_hook(state, hook)
        with pytest.raises(TypeError, match=re.escape(message)):
            ddp(torch.randn(4, 6)).sum().backward()
    # a hook on its own state still works, after the refusals
    ddp = DDP(nn.Linear(6, 3))
    state = hooks.register(ddp, "sign")
    ddp(torch.randn(4, 6)).sum().backward()
    assert state.stats()["steps"] == 1


def wrong_state_refused_at_registration(rank: int, world_size: int) -> None:
    """register(ddp, name, state=...) checks the state against the hook before
    registering anything: the same TypeError as the hook's first call, with no
    backward pass; state= with a group or options is refused too. The hook's own
    state registers afterwards."""
    import pytest

    torch_state = torch_powersgd.PowerSGDState(None)
    cases = [
        (
            "bf16",
            hooks.LowPrecisionState(dtype=torch.float16),
            "fastcomm.hooks bf16: the state is the fp16 hook's (dtype torch.float16); "
            "bf16_hook needs LowPrecisionState(dtype=torch.bfloat16)",
        ),
        ("powersgd", hooks.Int8State(), _needs("powersgd", "PowerSGDState", "fastcomm.hooks.int8.Int8State")),
        ("powersgd", torch_state, _needs("powersgd", "PowerSGDState", f"{torch_powersgd.__name__}.PowerSGDState")),
        ("int8", hooks.PowerSGDState(), _needs("int8", "Int8State", "fastcomm.hooks.powersgd.PowerSGDState")),
        ("allreduce", object(), _needs("allreduce", "HookState", "builtins.object")),
        # every state is a HookState: the allreduce hook refuses another hook's by its name
        (
            "allreduce",
            hooks.PowerSGDState(),
            "fastcomm.hooks.register: the state is the powersgd hook's (PowerSGDState), not the allreduce hook's",
        ),
    ]
    ddp = DDP(nn.Linear(6, 3))
    for name, state, message in cases:
        with pytest.raises(TypeError, match=re.escape(message)):
            hooks.register(ddp, name, state=state)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "fastcomm.hooks.register: got state= and process_group, ratio; the state already holds its group and options"
        ),
    ):
        hooks.register(ddp, "topk", dist.group.WORLD, state=hooks.TopKState(), ratio=0.5)
    with pytest.raises(ValueError, match="fastcomm.hooks.register: unknown hook 'lz4'"):
        hooks.register(ddp, "lz4", state=hooks.HookState())
    state = hooks.LowPrecisionState(dtype=torch.bfloat16)
    assert hooks.register(ddp, "bf16", state=state) is state
    ddp(torch.randn(4, 6)).sum().backward()
    assert state.stats()["steps"] == 1
