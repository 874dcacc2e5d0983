"""fastcomm refuses to load its extension under another torch than it was built
for, with one ImportError that names both versions and the rebuild command.

The imports run in fresh interpreters, in a temporary folder so that the
installed fastcomm is imported, not the checkout's."""

import subprocess
import sys
import textwrap

import pytest

import fastcomm
from fastcomm import _torch_check
from fastcomm._build_info import TORCH_VERSION as BUILT

REBUILD = "pip install --no-build-isolation --force-reinstall --no-deps ."


def run_python(code: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_normal_import_passes(tmp_path):
    done = run_python("import fastcomm; print(fastcomm.__version__)", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == fastcomm.__version__


def test_other_torch_version_refused_before_loading(tmp_path):
    done = run_python(
        """
        import sys
        import torch
        torch.__version__ = "2.99.0+cpu"
        try:
            import fastcomm
        except ImportError as error:
            print(error)
            print("loaded _C:", "fastcomm._C" in sys.modules)
        else:
            print("imported")
        """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    message, loaded = done.stdout.strip().splitlines()
    assert f"built for torch {BUILT}" in message
    assert "this process loaded torch 2.99.0+cpu" in message
    assert REBUILD in message and "bash scripts/setup.sh" in message
    assert loaded == "loaded _C: False"  # refused before the loader could fail or succeed


def test_undefined_symbol_becomes_the_same_message(tmp_path):
    # What the loader raises for an extension built against another torch.
    done = run_python(
        """
        import sys

        class RefuseC:
            def find_spec(self, name, path=None, target=None):
                if name == "fastcomm._C":
                    raise ImportError("_C.so: undefined symbol: _ZN3c104cuda9SetDeviceEa")

        sys.meta_path.insert(0, RefuseC())
        import fastcomm
        """,
        tmp_path,
    )
    assert done.returncode == 1
    message = last_line(done.stderr)
    assert message.startswith("ImportError: ")
    assert f"torch {BUILT}" in message and "undefined symbol: _ZN3c104cuda9SetDeviceEa" in message
    assert REBUILD in message


@pytest.mark.parametrize(
    "built, loaded, same",
    [
        ("2.13.0+cpu", "2.13.0+cpu", True),
        ("2.14.1+cu130", "2.14.1+cu130", True),
        ("2.13.0+cpu", "2.13.1+cpu", False),  # patch releases keep no C++ ABI promise
        ("2.13.0+cpu", "2.14.0+cpu", False),
        ("2.14.1+cu130", "2.14.1+cu128", False),  # another CUDA runtime
        ("2.14.1+cu130", "2.14.1+cpu", False),  # no libc10_cuda
        ("2.14.1", "2.14.1+cu130", False),  # another build of the release
        ("2.15.0.dev20260101+cpu", "2.15.0.dev20260102+cpu", False),  # nightlies change daily
    ],
)
def test_torch_builds_match(built, loaded, same):
    assert _torch_check.torch_builds_match(built, loaded) is same


def test_messages(monkeypatch):
    monkeypatch.setattr(_torch_check, "built_torch_version", lambda: "2.13.0+cpu")
    with pytest.raises(ImportError) as refused:
        _torch_check.check_before_load("2.14.1+cu130")
    assert str(refused.value) == (
        "fastcomm's compiled extension (fastcomm._C) was built for torch 2.13.0+cpu, this process loaded torch "
        f"2.14.1+cu130; {_torch_check.REBUILD}"
    )
    _torch_check.check_before_load("2.13.0+cpu")  # the same build: no error

    missing = ModuleNotFoundError("No module named 'fastcomm._C'", name="fastcomm._C")
    assert str(_torch_check.explain_load_failure(missing, "2.13.0+cpu")) == (
        f"fastcomm's compiled extension (fastcomm._C) is not built here; {_torch_check.REBUILD}"
    )

    stale = ImportError("_C.so: undefined symbol: x")
    assert str(_torch_check.explain_load_failure(stale, "2.13.0+cpu")) == (
        "fastcomm's compiled extension (fastcomm._C) failed to load under torch 2.13.0+cpu, the torch its build "
        f"recorded (_C.so: undefined symbol: x); {_torch_check.REBUILD}"
    )

    monkeypatch.setattr(_torch_check, "built_torch_version", lambda: None)  # not recorded (CMake build)
    _torch_check.check_before_load("2.14.1+cu130")
    assert str(_torch_check.explain_load_failure(stale, "2.14.1+cu130")) == (
        "fastcomm's compiled extension (fastcomm._C) was built for another torch (the build did not record "
        "which), this process loaded torch 2.14.1+cu130 (loading it failed: _C.so: undefined symbol: x); "
        f"{_torch_check.REBUILD}"
    )


def test_a_missing_extension_says_it_is_not_built(tmp_path):
    # No fastcomm._C anywhere: "from fastcomm import _C" alone would raise a
    # plain ImportError that reads like a circular import.
    done = run_python(
        """
        import importlib.util
        real = importlib.util.find_spec
        importlib.util.find_spec = lambda name, *a: None if name == "fastcomm._C" else real(name, *a)
        import fastcomm
        """,
        tmp_path,
    )
    assert done.returncode == 1
    message = last_line(done.stderr)
    assert message.startswith("ImportError: fastcomm's compiled extension (fastcomm._C) is not built here; ")
    assert REBUILD in message
