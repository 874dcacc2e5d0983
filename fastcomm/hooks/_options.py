"""Checks of hook options, run when a state is made (so at register()): a bad
value raises ValueError naming the hook and the option, before anything is
registered. Deprecated option names are translated here too."""

from __future__ import annotations

import functools
import inspect
import warnings
from typing import Any, Callable


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


def rename_options(
    owner: str, names: dict[str, str], options: dict[str, Any], positional: set[str] = frozenset(), stacklevel: int = 2
) -> dict[str, Any]:
    """`options` with every deprecated name of `names` (deprecated -> current)
    replaced by its current one, each with a DeprecationWarning (`stacklevel`
    counted from the caller of this function); TypeError naming `owner` when a
    deprecated name comes with its current one (among the options or in
    `positional`, the names given by position)."""
    options = dict(options)
    for old, new in names.items():
        if old not in options:
            continue
        if new in options or new in positional:
            raise TypeError(f"{owner}: got both {old}= (deprecated) and {new}=; pass {new}= only")
        warnings.warn(f"{owner}: {old}= is deprecated, use {new}=", DeprecationWarning, stacklevel=stacklevel + 1)
        options[new] = options.pop(old)
    return options


def renamed(owner: str, names: dict[str, str]) -> Callable[[Callable], Callable]:
    """Decorates a state's ``__init__`` so that the keyword arguments in `names`
    (deprecated -> current) keep working, as rename_options() says.
    ``__init__.renamed`` holds `names`, for make_state()."""

    def decorate(init: Callable) -> Callable:
        parameters = list(inspect.signature(init).parameters)

        @functools.wraps(init)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs = rename_options(owner, names, kwargs, set(parameters[: len(args)]), stacklevel=2)
            return init(*args, **kwargs)

        wrapper.renamed = dict(names)
        return wrapper

    return decorate
