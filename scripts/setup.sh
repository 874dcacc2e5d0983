#!/usr/bin/env bash
# Set-up on a fresh machine: a virtual environment with torch and the test and
# benchmark dependencies, and fastcomm built from source into it.
#
#   FASTCOMM_VENV   where the environment goes        (default: .venv)
#   FASTCOMM_TORCH  the torch requirement             (default: torch==2.13.0, the CPU build)
#   FASTCOMM_CUDA   0|1: build the CUDA kernels       (default: when torch is a CUDA build and nvcc is found)
#   FASTCOMM_EDITABLE 0|1: editable install           (default: 1)
#
# It prints what it installs, the compiler's progress (ninja's [n/N] steps, one
# short line per source file) and how long each part took. pip's full output
# goes to build/logs/<venv>-*.log; on a failure the log's last lines are shown.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FASTCOMM_VENV:-.venv}
torch_req=${FASTCOMM_TORCH:-torch==2.13.0}
python=${PYTHON:-python3}
# setuptools 77 reads pyproject.toml's SPDX licence; named here because pip keeps
# a venv's older setuptools where torch caps it (torch 2.11: setuptools<82).
packages=("$torch_req" numpy pytest pytest-benchmark ninja "setuptools>=77" wheel matplotlib)
logs=build/logs
log_prefix=$logs/$(basename "$venv")
mkdir -p "$logs"

part() {  # name, then the command: runs it and prints how long it took
  local name=$1 start=$SECONDS
  shift
  "$@"
  echo "== $name: $((SECONDS - start)) s" >&2
}

logged() {  # log file, awk filter program, then the command: its output goes to the log, through the filter to stderr
  local log=$1 filter=$2
  shift 2
  if ! ("$@" 2>&1 | tee "$log" | awk -v root="$PWD/" "$filter" >&2); then
    echo "== failed: $*" >&2
    echo "== last lines of $log:" >&2
    tail -n 60 "$log" >&2
    return 1
  fi
}

# pip's summary line only ("Successfully installed ..."), or a word that all was there.
summary_filter='/^Successfully installed / { print "   " $0; found = 1 } END { if (!found) print "   all already installed" }'
# ninja's "[n/N] <compiler command>" lines (pip indents them) as "[n/N] <source>",
# the link step and error lines.
build_filter='
/^ *\[[0-9]+\/[0-9]+\] / {
  src = "(" $2 ")"
  for (i = 3; i < NF; i++) if ($i == "-o") { src = $(i - 1); break }  # "... -c <source> -o <object>"
  if (index(src, root) == 1) src = substr(src, length(root) + 1)
  print "   " $1 " " src
  fflush()
  next
}
/ -shared / && /_C\./ { print "   linking fastcomm._C"; fflush() }
/^ *(error|ERROR|FAILED)|: error:/ { print "   " $0; fflush() }
'

create_venv() {
  if [[ ! -x "$venv/bin/python" ]]; then
    "$python" -m venv "$venv"
  fi
}

install_packages() {
  echo "== installing into $venv: ${packages[*]}" >&2
  logged "$log_prefix-packages.log" "$summary_filter" \
    "$venv/bin/pip" install --disable-pip-version-check "${packages[@]}"
}

build_fastcomm() {
  local mode=(-e .) kind=editable
  if [[ ${FASTCOMM_EDITABLE:-1} != 1 ]]; then
    mode=(.)
    kind=non-editable
  fi
  echo "== building fastcomm ($kind) into $venv; compiling:" >&2
  logged "$log_prefix-build.log" "$build_filter" \
    "$venv/bin/pip" install -v --disable-pip-version-check --no-build-isolation --no-deps "${mode[@]}"
}

check_import() {
  local venv_python
  venv_python=$(cd "$venv" && pwd)/bin/python
  (cd / && "$venv_python" -c "import fastcomm, torch
print('fastcomm', fastcomm.__version__, 'on torch', torch.__version__, '- cuda kernels:', fastcomm.cuda_kernels_compiled())") >&2
}

part "virtual environment $venv" create_venv
part "packages" install_packages
part "fastcomm build and install" build_fastcomm
part "import check" check_import
