"""Versions and build: torch, fastcomm, the torch the extension was built
for (recorded at build time: fastcomm/_torch_check.py), the CPU kernels'
instruction-set level (csrc/kernels/cpu/isa.h, through _C), the CUDA kernels."""

from __future__ import annotations

import platform

import torch
import torch.distributed as dist

import fastcomm
from fastcomm import _C, _torch_check
from fastcomm.doctor.report import Item

SECTION = "build"


def items() -> list[Item]:
    out = [
        Item(
            SECTION,
            "torch",
            "info",
            torch.__version__,
            data={
                "version": torch.__version__,
                "cuda": torch.version.cuda,
                "gloo": dist.is_gloo_available(),
                "nccl": dist.is_nccl_available(),
            },
        ),
        Item(SECTION, "fastcomm", "info", fastcomm.__version__, data={"version": fastcomm.__version__}),
    ]
    out.append(built_for(_torch_check.built_torch_version(), torch.__version__))
    best, active = _C.best_isa(), _C.active_isa()
    supported = [isa.name for isa in (_C.Isa.baseline, _C.Isa.avx2, _C.Isa.avx512) if _C.isa_supported(isa)]
    data = {"best": best.name, "active": active.name, "supported": supported, "machine": platform.machine()}
    if active != best:
        out.append(
            Item(
                SECTION,
                "CPU kernels",
                "warn",
                f"{active.name} (this CPU could run {best.name})",
                why="a cap is set in this process (_C.set_isa_cap)",
                fix="_C.set_isa_cap(_C.Isa.avx512) lifts it",
                data=data,
            )
        )
    elif best == _C.Isa.baseline:
        x86 = platform.machine() in ("x86_64", "AMD64")
        why = (
            "this CPU has neither AVX2+FMA+F16C nor AVX-512"
            if x86
            else "only the baseline code is compiled on this architecture"
        )
        out.append(
            Item(
                SECTION,
                "CPU kernels",
                "warn",
                "baseline",
                why=why,
                fix="none needed for correctness; reductions and conversions run scalar or SSE2",
                data=data,
            )
        )
    else:
        out.append(Item(SECTION, "CPU kernels", "ok", f"{active.name} (the best this CPU supports)", data=data))
    cuda = fastcomm.cuda_kernels_compiled()
    if cuda:
        out.append(Item(SECTION, "CUDA kernels", "ok", "compiled", data={"compiled": True}))
    else:
        why = (
            "this torch is a CPU build"
            if torch.version.cuda is None
            else "the build found no nvcc, or FASTCOMM_CUDA=0 was set"
        )
        out.append(
            Item(
                SECTION,
                "CUDA kernels",
                "info",
                "not compiled (CPU tensors only use fastcomm's own kernels)",
                why=why,
                fix="for CUDA: a CUDA torch and nvcc at build time (README, Install)",
                data={"compiled": False},
            )
        )
    return out


def built_for(built: str | None, running: str) -> Item:
    """The torch the extension was built for (`built`; None: the build did not
    record it) against the `running` torch; _torch_check decides whether they match."""
    data = {"built": built, "running": running}
    if built is None:
        return Item(
            SECTION, "built for", "info", "not recorded by this build (fastcomm/_build_info.py absent)", data=data
        )
    if _torch_check.torch_builds_match(built, running):
        return Item(SECTION, "built for", "ok", f"torch {built}", data=data)
    return Item(
        SECTION,
        "built for",
        "off",
        f"torch {built}, running torch {running}",
        why="an extension runs only under the torch build it was compiled for",
        fix=_torch_check.REBUILD,
        data=data,
    )
