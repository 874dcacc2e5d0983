"""Checks of hook options, run when a state is made (so at register()): a bad
value raises ValueError naming the hook and the option, before anything is
registered."""
from __future__ import annotations


def positive_int(hook: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"fastcomm.hooks {hook}: {name} must be an integer >= 1, got {value!r}")
    return value


def non_negative_int(hook: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"fastcomm.hooks {hook}: {name} must be an integer >= 0, got {value!r}")
    return value


def fraction(hook: str, name: str, value: object) -> float:
    """A number in (0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ValueError(f"fastcomm.hooks {hook}: {name} must be in (0, 1], got {value!r}")
    return float(value)


def non_negative_float(hook: str, name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(f"fastcomm.hooks {hook}: {name} must be a number >= 0, got {value!r}")
    return float(value)


def flag(hook: str, name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"fastcomm.hooks {hook}: {name} must be True or False, got {value!r}")
    return value
