"""The layers point down only (docs/architecture.md).

C++: every `#include "..."` under csrc/ must name a layer its own layer may
use. Python: every import of fastcomm's own modules under fastcomm/ (module
level or inside functions) must name a package its own package may use.
Each checker is also run on a made-up upward edge, so these tests fail when
the checker stops seeing violations.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
PACKAGE = ROOT / "fastcomm"

# Layer -> the layers its files may include (itself included). Lower layers
# never see higher ones: core <- kernels <- transport <- algorithms <- backend
# <- bindings; ops (torch operators over the kernels) sit beside transport and
# are reached only through the torch dispatcher.
CPP_ALLOWED = {
    "core": {"core"},
    "kernels": {"core", "kernels"},
    "ops": {"core", "kernels", "ops"},
    "transport": {"core", "kernels", "transport"},
    "algorithms": {"core", "kernels", "transport", "algorithms"},
    "backend": {"core", "kernels", "transport", "algorithms", "backend"},
    "bindings": {"core", "kernels", "ops", "transport", "algorithms", "backend", "bindings"},
}
# Python package (first component under fastcomm/) -> what it may import from fastcomm.
PY_ALLOWED = {
    "_C": set(),
    "_version": set(),
    "_build_info": set(),
    "_torch_check": {"_build_info"},
    "_options": set(),
    "_compat": set(),
    "_gloo": {"_options"},
    "_rendezvous": set(),
    "_ptracer": set(),
    "_shm": {"_C", "_gloo", "_options", "_ptracer", "_rendezvous"},
    "_agreement": {"_options", "_rendezvous", "_shm"},
    "_backend": {"_C", "_agreement", "_gloo", "_shm", "_options", "_rendezvous"},
    "hooks": {"_C", "_compat", "hooks"},
    "nn": {"_C", "_compat", "nn"},
    "sync": {"_C", "_compat", "sync"},  # the hooks' kernels through torch.ops, not the hooks package
    "bench": {"bench", "__init__"},  # the CLI imports fastcomm itself to register the backend
    "doctor": {"__init__", "_C", "_compat", "_options", "_ptracer", "_shm", "_torch_check", "bench", "doctor"},
    "__init__": {"_C", "_backend", "_torch_check", "_version", "hooks", "nn", "sync"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)
TORCH_INCLUDE = re.compile(r"^\s*#\s*include\s+<(ATen|c10|torch|cuda_runtime|pybind11)", re.MULTILINE)


def cpp_violations(files: dict[str, str]) -> list[str]:
    """`files`: path relative to csrc/ -> text. Returns 'file -> include (why)' lines."""
    bad = []
    for path, text in files.items():
        layer = path.split("/")[0]
        if layer not in CPP_ALLOWED:
            bad.append(f"{path}: not under a known layer {sorted(CPP_ALLOWED)}")
            continue
        for target in INCLUDE.findall(text):
            target_layer = target.split("/")[0]
            if target_layer not in CPP_ALLOWED[layer]:
                bad.append(f"{path} -> {target} ({layer} may not include {target_layer})")
            elif path.startswith("kernels/cpu/") and target.startswith("kernels/cuda/"):
                bad.append(f"{path} -> {target} (CPU kernels may not include CUDA code)")
            elif path.startswith("kernels/cuda/") and target.startswith("kernels/cpu/"):
                bad.append(f"{path} -> {target} (CUDA kernels may not include CPU code)")
        if path.endswith(".cuh") and TORCH_INCLUDE.search(text):
            bad.append(f"{path}: a .cuh kernel header must be torch-free")
    return bad


def _package_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "fastcomm":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(tree: ast.AST, own_package: str) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "fastcomm":  # from fastcomm import _C, hooks
                found += [f"fastcomm.{alias.name}" for alias in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append(f"fastcomm.{own_package}")  # relative imports stay inside their package
    return found


def python_violations(files: dict[str, str]) -> list[str]:
    """`files`: path relative to fastcomm/ -> source. Returns 'file -> module (why)' lines."""
    bad = []
    for path, text in files.items():
        parts = path[: -len(".py")].split("/")
        package = parts[0] if len(parts) > 1 or parts[0] != "__init__" else "__init__"
        if package not in PY_ALLOWED:
            bad.append(f"{path}: not in a known package {sorted(PY_ALLOWED)}")
            continue
        for module in _imports(ast.parse(text), package):
            target = _package_of(module)
            if target is not None and target != package and target not in PY_ALLOWED[package]:
                bad.append(f"{path} -> {module} ({package} may not import {target})")
    return bad


def _read(root: pathlib.Path, patterns: tuple[str, ...]) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for pattern in patterns for p in sorted(root.rglob(pattern))}


def test_cpp_includes_point_down():
    files = _read(CSRC, ("*.h", "*.cpp", "*.cu", "*.cuh"))
    assert len(files) > 40, sorted(files)  # the walk found the sources
    assert cpp_violations(files) == []


def test_python_imports_point_down():
    files = _read(PACKAGE, ("*.py",))
    assert "hooks/powersgd.py" in files and "bench/cli.py" in files
    assert python_violations(files) == []


def test_checkers_see_upward_edges():
    assert cpp_violations({"core/x.h": '#include "backend/work.h"\n'}) == [
        "core/x.h -> backend/work.h (core may not include backend)"
    ]
    assert cpp_violations({"kernels/cpu/x.cpp": '#include "ops/compress_ops.h"\n'})
    assert cpp_violations({"transport/shm/x.cpp": '#include "algorithms/algorithm.h"\n'})
    assert cpp_violations({"kernels/cuda/x.cuh": "#include <ATen/ATen.h>\n"})
    assert cpp_violations({"algorithms/x.cpp": '#include "backend/validation.h"\n#include "core/errors.h"\n'}) == [
        "algorithms/x.cpp -> backend/validation.h (algorithms may not include backend)"
    ]
    assert cpp_violations({"backend/x.cpp": '#include "algorithms/algorithm.h"\n'}) == []
    assert python_violations({"hooks/x.py": "def f():\n    from fastcomm.bench import harness\n"}) == [
        "hooks/x.py -> fastcomm.bench (hooks may not import bench)"
    ]
    assert python_violations({"_options.py": "from fastcomm import _C\n"})
    assert python_violations({"nn/x.py": "import fastcomm.hooks.state\n"})
    assert python_violations({"hooks/x.py": "from fastcomm.hooks.state import HookState\nfrom . import y\n"}) == []


def _protocol_code(name: str) -> int:
    """transport/shm/engine.cpp's protocol_code: FNV-1a of the name, folded to 16 bits."""
    h = 2166136261
    for byte in name.encode():
        h = ((h ^ byte) * 16777619) & 0xFFFFFFFF
    return (h >> 16) ^ (h & 0xFFFF)


def test_algorithm_codes_differ():
    """Ranks compare the code of the algorithm each runs (OpDescriptor::algorithm):
    two algorithms with one code would pass for each other."""
    names = set()
    for text in _read(CSRC / "algorithms", ("*.cpp",)).values():
        names.update(re.findall(r'const char\* name\(\) const override \{\s*return "([a-z0-9_]+)";', text))
    names.update({"gloo_fallback", "nccl"})  # the delegates' names, given at registration
    assert len(names) > 30, sorted(names)
    codes = {}
    for name in sorted(names):
        assert _protocol_code(name) not in codes, (name, codes.get(_protocol_code(name)))
        codes[_protocol_code(name)] = name
