"""oneCCL's CPU all_reduce for benchmarks/peers/run.py: build (setup.sh) and one round.

    python benchmarks/peers/oneccl.py --build                          # once (setup.sh runs it)
    python benchmarks/peers/oneccl.py --nproc 2 --sizes 8,1M --iters 30 --warmup 5 --settle 0.2

oneCCL has no Python binding for this torch, so the peer is a small C++
program (oneccl_worker.cpp: the same method as mpi_worker.py, through oneCCL's
own C++ API). The build takes the PyPI wheels `oneccl-cpu` (libccl.so.1, the
CPU library) and `oneccl-devel` (headers) without their dependencies (pip
would pull in Intel MPI and the GPU runtime), and adds what the wheels lack:
libccl.so.1 needs the Intel-compiler runtime under the name libccl.so.2 for
four symbols (ccl_runtime_stub.c gives them), and its transport (ATL "ofi")
loads libfabric, taken from the mpich peer's wheel (setup.sh installs it first).

A round starts `--nproc` workers on this host; rank 0 publishes oneCCL's
key-value-store address in a file the others read (no MPI launcher involved),
and prints the RESULT line run.py reads. CCL_WORKER_OFFLOAD=0 runs the
collectives on the calling thread, as every other library here does (oneCCL's
default adds a worker thread per rank, which on 2 cores competes with the ranks).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import rounds

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
HOME = os.path.join(ROOT, ".venv-peers-oneccl")
WORKER = os.path.join(HOME, "oneccl_worker")
LIBFABRIC_DIR = os.path.join(ROOT, ".venv-peers-mpich", "lib", "mpich")  # libfabric.so.1 of the mpich wheel
VERSION = "2022.2.0"


def available() -> str | None:
    """None when the worker is built and libfabric is there, else why not."""
    if not os.access(WORKER, os.X_OK):
        return f"no {WORKER}: run bash benchmarks/peers/setup.sh"
    if os.path.getmtime(WORKER) < os.path.getmtime(os.path.join(HERE, "oneccl_worker.cpp")):
        return f"{WORKER} is older than oneccl_worker.cpp: run python benchmarks/peers/oneccl.py --build"
    if not os.path.exists(os.path.join(LIBFABRIC_DIR, "libfabric.so.1")):
        return f"no libfabric.so.1 in {LIBFABRIC_DIR}: run bash benchmarks/peers/setup.sh"
    return None


def build() -> None:
    os.makedirs(HOME, exist_ok=True)
    wheels = os.path.join(HOME, "wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--no-deps",
            "-d",
            wheels,
            f"oneccl-cpu=={VERSION}",
            f"oneccl-devel=={VERSION}",
        ],
        check=True,
    )
    for wheel in glob.glob(os.path.join(wheels, "*.whl")):
        with zipfile.ZipFile(wheel) as z:
            z.extractall(os.path.join(HOME, "unpacked"))
    data = {
        name: os.path.join(HOME, "unpacked", f"{name}-{VERSION}.data", "data")
        for name in ("oneccl_cpu", "oneccl_devel")
    }
    lib = os.path.join(HOME, "lib")
    os.makedirs(lib, exist_ok=True)
    shutil.copy(os.path.join(data["oneccl_cpu"], "lib", "libccl.so.1"), lib)
    subprocess.run(
        [
            "gcc",
            "-O2",
            "-shared",
            "-fPIC",
            "-Wl,-soname,libccl.so.2",
            "-o",
            os.path.join(lib, "libccl.so.2"),
            os.path.join(HERE, "ccl_runtime_stub.c"),
        ],
        check=True,
    )
    subprocess.run(
        [
            "g++",
            "-O2",
            "-std=c++17",
            "-I",
            os.path.join(data["oneccl_devel"], "include"),
            os.path.join(HERE, "oneccl_worker.cpp"),
            "-o",
            WORKER,
            os.path.join(lib, "libccl.so.1"),
            "-Wl,-rpath,$ORIGIN/lib",
        ],
        check=True,
    )
    print(f"oneccl: {WORKER} (oneccl-cpu {VERSION})")


def run_round(
    nproc: int,
    sizes: str,
    iters: int,
    warmup: int,
    settle: float,
    round_ms: float = 0.0,
    max_samples: int = rounds.DEFAULT_MAX_SAMPLES,
    timeout: float = 600,
) -> int:
    env = dict(
        os.environ,
        CCL_WORKER_OFFLOAD="0",
        CCL_ATL_TRANSPORT="ofi",
        CCL_LOCAL_SIZE=str(nproc),
        CCL_LOG_LEVEL="error",
        LD_LIBRARY_PATH=LIBFABRIC_DIR,
    )
    with tempfile.TemporaryDirectory(prefix="fastcomm-oneccl-") as tmp:
        kvs = os.path.join(tmp, "kvs")
        procs = [
            subprocess.Popen(
                [
                    WORKER,
                    str(r),
                    str(nproc),
                    kvs,
                    sizes,
                    str(iters),
                    str(warmup),
                    str(settle),
                    str(round_ms),
                    str(max_samples),
                ],
                env=dict(env, CCL_LOCAL_RANK=str(r)),
                stdout=subprocess.PIPE if r == 0 else None,
                text=True,
            )
            for r in range(nproc)
        ]
        try:
            out, _ = procs[0].communicate(timeout=timeout)
            codes = [procs[0].returncode] + [p.wait(timeout=timeout) for p in procs[1:]]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    sys.stdout.write(out)
    return max(abs(c) for c in codes)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", action="store_true")
    p.add_argument("--nproc", type=int, default=2)
    p.add_argument("--sizes", default="8")
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    rounds.add_arguments(p)
    p.add_argument(
        "--settle", type=float, default=0.2, help="seconds of untimed small all_reduces before the first size"
    )
    args = p.parse_args()
    if args.build:
        build()
        return 0
    reason = available()
    if reason:
        p.error(reason)
    return run_round(args.nproc, args.sizes, args.iters, args.warmup, args.settle, args.round_ms, args.max_samples)


if __name__ == "__main__":
    sys.exit(main())
