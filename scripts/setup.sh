#!/usr/bin/env bash
# Set-up on a fresh machine: a virtual environment with torch and the test and
# benchmark dependencies, and fastcomm built from source into it.
#
#   FASTCOMM_VENV   where the environment goes        (default: .venv)
#   FASTCOMM_TORCH  the torch requirement             (default: torch==2.13.0, the CPU build)
#   FASTCOMM_CUDA   0|1: build the CUDA kernels       (default: when torch is a CUDA build and nvcc is found)
#   FASTCOMM_EDITABLE 0|1: editable install           (default: 1)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FASTCOMM_VENV:-.venv}
torch_req=${FASTCOMM_TORCH:-torch==2.13.0}
python=${PYTHON:-python3}

if [[ ! -x "$venv/bin/python" ]]; then
  echo "== creating $venv" >&2
  "$python" -m venv "$venv"
fi
echo "== installing $torch_req and the tools into $venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check "$torch_req" numpy pytest pytest-benchmark ninja setuptools wheel matplotlib
echo "== building fastcomm into $venv" >&2
if [[ ${FASTCOMM_EDITABLE:-1} == 1 ]]; then
  "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps -e .
else
  "$venv/bin/pip" install -q --disable-pip-version-check --no-build-isolation --no-deps .
fi
venv_python=$(cd "$venv" && pwd)/bin/python
(cd / && "$venv_python" -c "import fastcomm; print('fastcomm', fastcomm.__version__, 'cuda kernels:', fastcomm.cuda_kernels_compiled())") >&2
