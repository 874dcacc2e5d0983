"""Every C++ file that the unity build merges compiles on its own.

setup.py compiles the files of its UNITY_LAYERS as one translation unit per
layer, so a file that uses a fastcomm header without including it still builds
when a file before it in the layer included that header; an IDE, a
FASTCOMM_UNITY=0 build or a reordering then fails. This test parses each such
file alone (-fsyntax-only, no object code). torch's heavy headers come from one
precompiled header (PCH_HEADERS), which makes the pass ~4x faster: so a file
that relies on its neighbours for a *torch* header is not caught here, one
that relies on them for a fastcomm header is (the made-up file below).

Run in the CPU stage of scripts/test.sh only: the .cpp files are the same in
the CUDA build (CUDA code lives in .cu files), and the other torch's headers are
checked by that build itself.
"""

from __future__ import annotations

import ast
import concurrent.futures
import os
import pathlib
import shutil
import subprocess
import sysconfig

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CXX = os.environ.get("CXX", "c++")  # what torch.utils.cpp_extension compiles with
# The torch headers most files include, precompiled once per test run.
PCH_HEADERS = (
    "ATen/ATen.h",
    "ATen/core/jit_type.h",
    "torch/library.h",
    "torch/csrc/distributed/c10d/Backend.hpp",
    "torch/csrc/distributed/c10d/Store.hpp",
    "torch/csrc/distributed/c10d/Types.hpp",
    "torch/csrc/distributed/c10d/Work.hpp",
)

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("FASTCOMM_EXPECT_CUDA_KERNELS") == "1",
        reason="checked in the CPU stage: the .cpp files are the same in the CUDA build",
    ),
    pytest.mark.skipif(shutil.which(CXX) is None, reason=f"no C++ compiler ({CXX})"),
]


def _setup_constant(name: str):
    """A module-level constant of setup.py (which cannot be imported: it runs setup())."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"setup.py no longer defines {name}")


def _flags() -> list[str]:
    # The build's flags: setup.py's CXX_FLAGS, and the -std and defines torch's
    # cpp_extension adds (C++20 for torch 2.13 and 2.14).
    from torch.utils import cpp_extension

    includes = [str(ROOT / "csrc"), *cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    return [
        "-std=c++20",
        *_setup_constant("CXX_FLAGS"),
        "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-DTORCH_EXTENSION_NAME=_C",
        *(f"-I{p}" for p in includes),
    ]


@pytest.fixture(scope="module")
def parse_alone(tmp_path_factory):
    """parse_alone(path) -> (ok, compiler output) for one .cpp file parsed on its own."""
    flags = _flags()
    pch_dir = tmp_path_factory.mktemp("pch")
    header = pch_dir / "torch_headers.h"
    header.write_text("".join(f"#include <{h}>\n" for h in PCH_HEADERS))
    built = subprocess.run(
        [CXX, *flags, "-x", "c++-header", str(header), "-o", f"{header}.gch"], capture_output=True, text=True
    )
    assert built.returncode == 0, built.stderr[-4000:]

    def parse(path: pathlib.Path) -> tuple[bool, str]:
        done = subprocess.run(
            [CXX, *flags, "-include", str(header), "-fsyntax-only", str(path)], capture_output=True, text=True
        )
        return done.returncode == 0, done.stderr

    yield parse
    pathlib.Path(f"{header}.gch").unlink()  # ~400 MB; pytest keeps its last temporary folders


def test_each_unity_file_compiles_alone(parse_alone):
    layers = _setup_constant("UNITY_LAYERS")
    files = sorted(p for layer in layers for p in (ROOT / "csrc" / layer).glob("*.cpp"))
    assert len(files) > 40, files  # the five layers' files, not an empty glob
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        results = dict(zip(files, pool.map(parse_alone, files)))
    failed = {p.relative_to(ROOT): out for p, (ok, out) in results.items() if not ok}
    assert not failed, "files that do not compile on their own:\n" + "\n".join(
        f"--- {p}\n{out[:2000]}" for p, out in failed.items()
    )


def test_a_file_missing_a_fastcomm_include_fails(parse_alone, tmp_path):
    """The check sees what it is for: shm::Arena used without transport/shm/arena.h
    (the eleventh-session break), with and then without the include."""
    body = "fastcomm::shm::Arena* arena = nullptr;\n"
    good = tmp_path / "good.cpp"
    good.write_text('#include "transport/shm/arena.h"\n' + body)
    bad = tmp_path / "bad.cpp"
    bad.write_text(body)
    assert parse_alone(good)[0], parse_alone(good)[1]
    ok, out = parse_alone(bad)
    assert not ok and "Arena" in out, out
