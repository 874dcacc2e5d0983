"""A hook handed a state that is not its own (another hook's, torch's, or no
hook state at all) raises a TypeError naming the hook, the state it needs and
the one it got, at its first call: before any collective, on every rank alike."""
from __future__ import annotations

import re

import torch
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

import fastcomm.hooks as hooks


def _needs(hook: str, expected: str, got: str) -> str:
    return (f"fastcomm.hooks {hook}: the state must be a fastcomm.hooks.{expected}, got {got} "
            f"(fastcomm.hooks.register(ddp_model, '{hook}') makes the right one)")


def wrong_state_is_named(rank: int, world_size: int) -> None:
    """Another hook's state, torch's PowerSGDState, a plain object or None: each
    hook refuses it at the first backward; the right state works afterwards."""
    import pytest

    cases = [
        (hooks.fp16_hook, hooks.PowerSGDState(),
         _needs("fp16", "LowPrecisionState", "fastcomm.hooks.powersgd.PowerSGDState")),
        (hooks.fp16_hook, object(), _needs("fp16", "LowPrecisionState", "builtins.object")),
        (hooks.bf16_hook, hooks.LowPrecisionState(dtype=torch.float16),
         "fastcomm.hooks bf16: the state is the fp16 hook's (dtype torch.float16); "
         "bf16_hook needs LowPrecisionState(dtype=torch.bfloat16)"),
        (hooks.fp16_hook, hooks.LowPrecisionState(dtype=torch.bfloat16),
         "fastcomm.hooks fp16: the state is the bf16 hook's (dtype torch.bfloat16); "
         "fp16_hook needs LowPrecisionState(dtype=torch.float16)"),
        (hooks.int8_hook, hooks.TopKState(), _needs("int8", "Int8State", "fastcomm.hooks.topk.TopKState")),
        (hooks.topk_hook, hooks.SignState(), _needs("topk", "TopKState", "fastcomm.hooks.sign.SignState")),
        (hooks.sign_hook, hooks.Int8State(), _needs("sign", "SignState", "fastcomm.hooks.int8.Int8State")),
        (hooks.powersgd_hook, hooks.HookState(),
         _needs("powersgd", "PowerSGDState", "fastcomm.hooks.state.HookState")),
        (hooks.powersgd_hook, torch_powersgd.PowerSGDState(None),
         _needs("powersgd", "PowerSGDState", f"{torch_powersgd.__name__}.PowerSGDState")),
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
