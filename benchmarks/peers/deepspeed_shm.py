"""DeepSpeed 0.19.8's shared-memory all_reduce (its ShareMemCommBuilder op:
csrc/cpu/comm/shm_interface.cpp + shm.cpp), built from the sdist with the
flags DeepSpeed's CPU op builder uses (-O3 -march=native -fopenmp and the SIMD
define), against the torch of this interpreter: the op alone, without
DeepSpeed's Python package and its dependencies.

    python benchmarks/peers/deepspeed_shm.py        # build (setup.sh runs it); prints the module

Its protocol (as deepspeed.comm uses it): LOCAL_SIZE = world size (all ranks on
this host), MASTER_ADDR/MASTER_PORT name its shared memory, initialize(world,
rank) once, then torch.ops.deepspeed.inference_all_reduce_(tensor) sums in place
(float32, bfloat16, float16).
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HOME = os.path.join(HERE, "..", "..", ".venv-peers-deepspeed")
VERSION = "0.19.8"  # setup.sh downloads this sdist
SDIST = os.path.join(HOME, f"deepspeed-{VERSION}")
BUILD = os.path.join(HOME, "build")


def available() -> str | None:
    """None when the sdist is unpacked (setup.sh), else why not."""
    if not os.path.isdir(os.path.join(SDIST, "csrc", "cpu", "comm")):
        return f"no {os.path.abspath(SDIST)}: run bash benchmarks/peers/setup.sh"
    return None


def load():
    from torch.utils import cpp_extension

    with open("/proc/cpuinfo") as f:
        simd = "-D__AVX512__" if "avx512" in f.read() else "-D__AVX256__"
    comm = os.path.join(SDIST, "csrc", "cpu", "comm")
    os.makedirs(BUILD, exist_ok=True)
    return cpp_extension.load(
        "deepspeed_shm_comm",
        [os.path.join(comm, "shm_interface.cpp"), os.path.join(comm, "shm.cpp")],
        extra_include_paths=[os.path.join(SDIST, "csrc", "cpu", "includes")],
        extra_cflags=["-O3", "-march=native", "-fopenmp", simd],
        extra_ldflags=["-fopenmp"],
        build_directory=BUILD,
        verbose=False,
    )


if __name__ == "__main__":
    reason = available()
    if reason:
        sys.exit(reason)
    module = load()
    print(f"deepspeed {VERSION} shm op: {module.__file__}, vector kernel level {module.vector_kernel_level()}")
