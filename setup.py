"""Build fastcomm's C++/CUDA extension (``fastcomm._C``) with torch.utils.cpp_extension.

CUDA sources (csrc/kernels/cuda/*.cu) are compiled when the installed torch is a
CUDA build and nvcc is found; ``FASTCOMM_CUDA=0|1`` overrides the choice.  This is
decided from ``torch.version.cuda`` and the toolkit, never from
``torch.cuda.is_available()``: a build machine usually has no GPU.

Install with ``pip install --no-build-isolation .`` (an isolated build would
download a second torch).
"""
import glob
import os
import shutil
import sys

from setuptools import find_packages, setup

import torch
from torch.utils import cpp_extension

ROOT = os.path.dirname(os.path.abspath(__file__))


def _find_cuda_home() -> str | None:
    for candidate in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if candidate and os.path.exists(os.path.join(candidate, "bin", "nvcc")):
            return candidate
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else None


def _want_cuda(cuda_home: str | None) -> bool:
    forced = os.environ.get("FASTCOMM_CUDA")
    if forced not in (None, "", "0", "1"):
        sys.exit(f"FASTCOMM_CUDA must be 0 or 1, got {forced!r}")
    if forced == "0":
        return False
    possible = torch.version.cuda is not None and cuda_home is not None
    if forced == "1" and not possible:
        sys.exit(
            "FASTCOMM_CUDA=1 but a CUDA build is impossible: "
            f"torch.version.cuda={torch.version.cuda!r}, nvcc found={cuda_home is not None}"
        )
    return possible


def _sources(pattern: str) -> list[str]:
    return sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def _extension():
    cuda_home = _find_cuda_home()
    with_cuda = _want_cuda(cuda_home)
    cpu_sources = [s for s in _sources("csrc/**/*.cpp") if "/cuda/" not in s]
    # No -std flag: torch.utils.cpp_extension picks the standard its headers need
    # (C++17 for torch 2.13, C++20 for 2.14).
    cxx_flags = ["-O3", "-Wall", "-Wno-unused-parameter"]
    define_macros = [("FASTCOMM_WITH_CUDA", "1" if with_cuda else "0")]
    include_dirs = [os.path.join(ROOT, "csrc")]
    if not with_cuda:
        return cpp_extension.CppExtension(
            "fastcomm._C",
            cpu_sources,
            include_dirs=include_dirs,
            define_macros=define_macros,
            extra_compile_args={"cxx": cxx_flags},
        )

    # torch's cpp_extension reads CUDA_HOME at import time of its helpers; set it
    # before any CUDAExtension object is made so the link finds -lcudart.
    os.environ["CUDA_HOME"] = cuda_home
    cpp_extension.CUDA_HOME = cuda_home
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "8.0;9.0")
    # ATen/cuda headers include cusparse.h/cublas.h, which the pip CUDA wheels ship
    # under site-packages/nvidia/cu*/include rather than in the toolkit.
    site_packages = os.path.dirname(os.path.dirname(torch.__file__))
    include_dirs += sorted(glob.glob(os.path.join(site_packages, "nvidia", "cu*", "include")))
    include_dirs += sorted(glob.glob(os.path.join(site_packages, "nvidia", "nccl", "include")))
    cuda_sources = _sources("csrc/kernels/cuda/*.cu") + _sources("csrc/kernels/cuda/*.cpp")
    return cpp_extension.CUDAExtension(
        "fastcomm._C",
        cpu_sources + cuda_sources,
        include_dirs=include_dirs,
        define_macros=define_macros,
        extra_compile_args={"cxx": cxx_flags, "nvcc": ["-O3", "--expt-relaxed-constexpr"]},
    )


setup(
    name="fastcomm",
    version="0.1.0",
    description="Fast data-parallel communication for PyTorch: a c10d backend, fused kernels, DDP hooks",
    packages=find_packages(include=["fastcomm", "fastcomm.*"]),
    python_requires=">=3.10",
    install_requires=["torch", "numpy"],
    extras_require={"plot": ["matplotlib"]},  # fastcomm-bench --plot
    ext_modules=[_extension()],
    cmdclass={"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=True)},
    entry_points={"console_scripts": ["fastcomm-bench = fastcomm.bench.cli:main"]},
    zip_safe=False,
)
