"""The package's metadata (pyproject.toml) and what an installed fastcomm carries."""

import ast
import importlib.metadata
import pathlib
import re

import pytest
from packaging.requirements import Requirement

import fastcomm
from fastcomm import _version

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_written_once():
    assert fastcomm.__version__ == _version.__version__
    assert re.fullmatch(r"\d+\.\d+\.\d+", fastcomm.__version__)
    assert PROJECT["project"]["dynamic"] == ["version"]
    assert PROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "fastcomm._version.__version__"}
    assert importlib.metadata.version("fastcomm") == fastcomm.__version__  # what the installed metadata says
    assert f"## {fastcomm.__version__}" in (ROOT / "CHANGELOG.md").read_text()


def test_setup_py_builds_only_the_extension():
    calls = [
        node
        for node in ast.walk(ast.parse((ROOT / "setup.py").read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup"
    ]
    assert len(calls) == 1
    assert sorted(k.arg for k in calls[0].keywords) == ["cmdclass", "ext_modules"]


def test_licence():
    assert PROJECT["project"]["license"] == "BSD-3-Clause"
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License\n\nCopyright (c) fastcomm contributors\n")
    assert importlib.metadata.metadata("fastcomm")["License-Expression"] == "BSD-3-Clause"


def test_torch_range_is_the_one_ci_tests():
    requirements = {Requirement(r).name: Requirement(r) for r in PROJECT["project"]["dependencies"]}
    assert set(requirements) == {"torch", "numpy"}
    ci = re.findall(r"FASTCOMM_TORCH=torch==([\d.]+)", (ROOT / "scripts" / "test.sh").read_text())
    # The third build is a check for the GPU machines' torch (installed there with --no-deps), not a
    # release the package asks pip for.
    assert ci == ["2.13.0", "2.14.1", "2.11.0"]
    assert all(requirements["torch"].specifier.contains(v) for v in ci[:2])
    assert not requirements["torch"].specifier.contains("2.12.0")
    assert not requirements["torch"].specifier.contains("2.15.0")


def test_classifiers():
    classifiers = PROJECT["project"]["classifiers"]
    assert "Development Status :: 3 - Alpha" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert PROJECT["project"]["requires-python"] == ">=3.10"
    assert "Programming Language :: Python :: 3.10" in classifiers


def test_command_and_extra():
    scripts = {e.name: e.value for e in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts["fastcomm-bench"] == "fastcomm.bench.cli:main"
    assert PROJECT["project"]["optional-dependencies"] == {"plot": ["matplotlib"]}


def test_installed_package_carries_its_data():
    """In the non-editable CI install this looks into site-packages."""
    package = pathlib.Path(fastcomm.__file__).parent
    data = PROJECT["tool"]["setuptools"]["package-data"]["fastcomm"]
    assert sorted(data) == ["_C.pyi", "py.typed"]
    for name in data + ["_build_info.py"]:
        assert (package / name).is_file(), name
