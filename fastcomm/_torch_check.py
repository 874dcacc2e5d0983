"""Refuses to load fastcomm._C under another torch than the one it was built for.

A torch extension has no stable binary interface: torch keeps no C++ ABI
between releases (patch releases and nightlies included), and the builds of one
release differ too (``+cpu`` against ``+cu130``: a CUDA build of the extension
links libc10_cuda and one CUDA runtime; a CPU build under a CUDA torch loads but
has no CUDA kernels). So the whole version string must match: release numbers,
any pre-release or dev part, and the local tag. Under another torch the loader
usually fails on an undefined symbol, or the extension loads and misbehaves;
either way the user gets one message naming both versions and the rebuild.

The version the extension was built for comes from ``fastcomm/_build_info.py``,
which setup.py writes at build time (it is generated, not kept in git). This
module imports neither torch nor ``_C``: ``fastcomm/__init__.py`` calls it
before it loads ``_C``.
"""

from __future__ import annotations

REBUILD = (
    "rebuild fastcomm against this torch, from fastcomm's source folder: "
    "pip install --no-build-isolation --force-reinstall --no-deps .  "
    "(add -e for an editable install), or: bash scripts/setup.sh"
)


def torch_builds_match(built: str, loaded: str) -> bool:
    """True when an extension built against torch `built` may run under torch
    `loaded` (both ``torch.__version__`` strings): only the same build."""
    return str(built).strip() == str(loaded).strip()


def built_torch_version() -> str | None:
    """The ``torch.__version__`` fastcomm._C was built against, or None where the
    build did not record it (an extension built by CMakeLists.txt)."""
    try:
        from fastcomm._build_info import TORCH_VERSION
    except ImportError:
        return None
    return TORCH_VERSION


def mismatch_message(built: str | None, loaded: str, detail: str = "") -> str:
    """Names both torch versions (`built` None: not recorded) and the rebuild."""
    built_text = f"torch {built}" if built else "another torch (the build did not record which)"
    message = f"fastcomm's compiled extension (fastcomm._C) was built for {built_text}, "
    message += f"this process loaded torch {loaded}"
    if detail:
        message += f" ({detail})"
    return f"{message}; {REBUILD}"


def check_before_load(loaded: str) -> None:
    """Raises ImportError when the recorded build differs from torch `loaded`."""
    built = built_torch_version()
    if built is not None and not torch_builds_match(built, loaded):
        raise ImportError(mismatch_message(built, loaded))


def check_built() -> None:
    """ImportError saying the extension is not built when no fastcomm._C file
    is there (``from fastcomm import _C`` would raise a plain ImportError that
    reads like a circular import)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("fastcomm._C")
    except ImportError:
        return  # a finder refused it: the import that follows fails and explain_load_failure words it
    if spec is None:
        raise ImportError(f"fastcomm's compiled extension (fastcomm._C) is not built here; {REBUILD}")


def explain_load_failure(error: ImportError, loaded: str) -> ImportError:
    """The ImportError to raise instead of `error`, which ``import fastcomm._C``
    raised after check_before_load passed."""
    if isinstance(error, ModuleNotFoundError) and error.name == "fastcomm._C":
        return ImportError(f"fastcomm's compiled extension (fastcomm._C) is not built here; {REBUILD}")
    built = built_torch_version()
    if built is not None and torch_builds_match(built, loaded):
        # The record matches, yet the loader refused (a stale record, or a
        # library of another build on the loader's path): still a rebuild.
        return ImportError(
            f"fastcomm's compiled extension (fastcomm._C) failed to load under torch {loaded}, "
            f"the torch its build recorded ({error}); {REBUILD}"
        )
    # Typically an undefined symbol: the extension was built for another torch.
    return ImportError(mismatch_message(built, loaded, f"loading it failed: {error}"))
