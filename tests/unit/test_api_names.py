"""Argument names of fastcomm's public API against torch's: PowerSGDState takes
torch's PowerSGDState's arguments in torch's order with torch's defaults (one
stated exception), and no public callable of fastcomm.hooks, fastcomm.nn or
fastcomm.sync names a process group anything but process_group."""

import inspect

import pytest
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as torch_powersgd

import fastcomm.hooks
import fastcomm.nn
import fastcomm.sync

# fastcomm's default differs, for the reason PowerSGDState's docstring states
DIFFERENT_DEFAULTS = {"batch_tensors_with_same_shape": (False, True)}


def _parameters(fn) -> dict:
    return {name: p.default for name, p in inspect.signature(fn).parameters.items() if name != "self"}


def test_powersgd_state_has_torchs_arguments_and_defaults():
    ours, torchs = _parameters(fastcomm.hooks.PowerSGDState), _parameters(torch_powersgd.PowerSGDState)
    assert list(ours) == list(torchs)
    assert ours.pop("process_group") is None  # torch's has no default: it must be given there
    torchs.pop("process_group")
    for name, (torch_default, our_default) in DIFFERENT_DEFAULTS.items():
        assert (torchs.pop(name), ours.pop(name)) == (torch_default, our_default)
    assert ours == torchs


def test_powersgd_former_names_are_checked_before_a_group_is_needed():
    """The deprecated names are translated before the state needs torch.distributed:
    both names at once raise TypeError here, without an initialized group."""
    with pytest.raises(TypeError, match="got both error_feedback= .deprecated. and use_error_feedback="):
        fastcomm.hooks.PowerSGDState(error_feedback=True, use_error_feedback=True)
    with pytest.warns(DeprecationWarning, match="start_step= is deprecated, use start_powerSGD_iter="):
        with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
            fastcomm.hooks.PowerSGDState(start_step=3)


def _public_callables():
    for module in (fastcomm.hooks, fastcomm.nn, fastcomm.sync):
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj):
                yield f"{module.__name__}.{name}", obj


@pytest.mark.parametrize("qualified, obj", list(_public_callables()), ids=lambda v: v if isinstance(v, str) else "")
def test_groups_are_called_process_group(qualified, obj):
    """A parameter named `group` is allowed only as ModelSync's deprecated,
    keyword-only alias."""
    try:
        parameters = inspect.signature(obj).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return
    group = parameters.get("group")
    if qualified == "fastcomm.sync.ModelSync":
        assert "process_group" in parameters and group.kind is inspect.Parameter.KEYWORD_ONLY
    else:
        assert group is None, qualified
