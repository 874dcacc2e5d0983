#!/usr/bin/env bash
# The CUDA path on a machine with a GPU, in one command:
#
#   bash scripts/gpu_check.sh [OUT_DIR]
#
#  1. build: fastcomm with its CUDA kernels, in place, with the Python that
#     holds torch (PYTHON, default python3; nothing is downloaded: the GPU
#     machines have no network). Only the visible GPU's architecture is
#     compiled. Where that Python's setuptools is older than 77 (it cannot read
#     pyproject.toml's licence), the extension is built from a copy of the tree
#     whose pyproject.toml states the licence the old way.
#  2. probes: tests/gpu/test_stream_order.py (stream ordering through NCCL).
#  3. tests: the rest of tests/gpu.
#  4. memcheck and racecheck: compute-sanitizer over the kernel tests (the
#     compression and SyncBatchNorm operators).
#  5. benchmarks: benchmarks/cuda_kernels.py (its record in OUT_DIR).
#
# Each step prints its row as it ends (step, outcome, seconds, detail) and the
# table is printed again at the end. Every step has a time limit, and the whole
# run a deadline (FASTCOMM_GPU_CHECK_SECONDS, default 540): a step that cannot
# fit in what is left is reported as skipped. Without a GPU (or without nvcc,
# or with a CPU build of torch) every step that needs one is reported as
# skipped and the script still runs to the end. A step that fails or outlasts
# its limit makes the exit status 1. Logs (at most 7 files) go to OUT_DIR
# (default build/gpu_check).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$(mkdir -p "${1:-build/gpu_check}" && cd "${1:-build/gpu_check}" && pwd)
python=${PYTHON:-python3}
if ! "$python" -c "import torch" 2>/dev/null && [[ -x .venv/bin/python ]]; then
  python=$root/.venv/bin/python  # a developer's machine: the README's environment
fi
deadline=$((SECONDS + ${FASTCOMM_GPU_CHECK_SECONDS:-540}))
# step -> its time limit in seconds
declare -A limit=([build]=240 [probes]=120 [tests]=180 [memcheck]=90 [racecheck]=90 [benchmarks]=90)

rows=()
row_format='%-12s %-8s %6s  %s'  # step, outcome, seconds, detail
record() {  # step, outcome, seconds, detail
  rows+=("$(printf "$row_format" "$1" "$2" "$3" "$4")")
  echo "${rows[-1]}"
}

# pytest's summary line ("3 passed, 2 skipped in 1.2s") from a log, without the time.
summary_of() {
  grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$1" | tail -n 1 | sed -E 's/=+//g; s/ in [0-9.]+s.*//; s/^ +//'
}

fits() {  # step: whether its limit fits before the deadline (else it is recorded as skipped)
  if ((SECONDS + limit[$1] > deadline)); then
    record "$1" skipped 0 "no time left before the deadline (its limit: ${limit[$1]} s)"
    return 1
  fi
}

run_step() {  # name, log file, then the command: runs it within the step's limit, records its outcome
  local name=$1 log=$2 start=$SECONDS rc=0 summary
  shift 2
  fits "$name" || return 0
  timeout -k 15 "${limit[$name]}" "$@" >"$log" 2>&1 || rc=$?
  summary=$(summary_of "$log")
  if [[ $rc == 0 && $summary =~ ^[0-9]+\ skipped ]]; then  # pytest ran and every test skipped itself (no GPU)
    record "$name" skipped $((SECONDS - start)) "$summary"
  elif [[ $rc == 0 ]]; then
    record "$name" passed $((SECONDS - start)) "$summary"
  elif grep -E "Device not supported" "$log" >/dev/null; then  # compute-sanitizer on the H200 (gVisor) machines
    record "$name" skipped $((SECONDS - start)) "compute-sanitizer does not support this device"
  elif [[ $rc == 124 || $rc == 137 ]]; then
    record "$name" timeout $((SECONDS - start)) "$summary (stopped at ${limit[$name]} s; log: $log)"
  else
    record "$name" failed $((SECONDS - start)) "$summary (exit $rc; log: $log)"
  fi
}

# The extension built in place from a copy of the tree whose pyproject.toml
# gives the licence as setuptools before 77 reads it; the built files are
# copied back into fastcomm/.
build_with_old_setuptools() {
  local copy
  copy=$(mktemp -d)
  tar --exclude=./build --exclude='./.venv*' --exclude=./.git -cf - . | tar -xf - -C "$copy" || return 1
  sed -i -E 's/^license = "([^"]+)"/license = { text = "\1" }/; /^license-files/d' "$copy/pyproject.toml"
  (cd "$copy" && "$python" setup.py build_ext --inplace) || return 1
  cp "$copy"/fastcomm/_C*.so "$copy"/fastcomm/_build_info.py fastcomm/
  rm -rf "$copy"
}

build() {
  local setuptools_major
  setuptools_major=$("$python" -c "import setuptools; print(setuptools.__version__.split('.')[0])")
  export FASTCOMM_CUDA=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-${gpu%% *}} MAX_JOBS=${MAX_JOBS:-$(nproc)}
  echo "setuptools $setuptools_major, TORCH_CUDA_ARCH_LIST=$TORCH_CUDA_ARCH_LIST, MAX_JOBS=$MAX_JOBS"
  if ((setuptools_major >= 77)); then
    "$python" -m pip install -v --no-build-isolation --no-deps --no-index -e .
  else
    build_with_old_setuptools
  fi
}

gpu=$("$python" - <<'PY' 2>/dev/null
import torch
if torch.cuda.is_available():
    major, minor = torch.cuda.get_device_capability()
    print(f"{major}.{minor} {torch.cuda.get_device_name()}")
PY
)
torch_cuda=$("$python" -c "import torch; print(torch.version.cuda or '')" 2>/dev/null)
torch_version=$("$python" -c "import torch; print(torch.__version__)" 2>/dev/null)
nvcc=$(command -v nvcc || { [[ -x /usr/local/cuda/bin/nvcc ]] && echo /usr/local/cuda/bin/nvcc; })
sanitizer=$(command -v compute-sanitizer ||
  { [[ -x /usr/local/cuda/bin/compute-sanitizer ]] && echo /usr/local/cuda/bin/compute-sanitizer; })
echo "== python: $python (torch ${torch_version:-missing}, CUDA ${torch_cuda:-none}); GPU: ${gpu:-none}; nvcc: ${nvcc:-none}"
printf "$row_format\n" step outcome s detail

# 1. build
if [[ -z $gpu ]]; then
  record build skipped 0 "no CUDA device visible"
elif [[ -z $torch_cuda || -z $nvcc ]]; then
  record build skipped 0 "needs a CUDA build of torch and nvcc"
  gpu=""
elif [[ $("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p') != "${torch_cuda%%.*}" ]]; then
  record build failed 0 "nvcc's CUDA major version is not torch's (CUDA $torch_cuda)"
  gpu=""
else
  export -f build build_with_old_setuptools
  export python gpu
  run_step build "$out/build.log" bash -c build
  [[ ${rows[-1]} =~ ^build\ +passed ]] || gpu=""
fi
if [[ -n $gpu ]]; then
  kernels=$(cd "$root" && "$python" -c "import fastcomm; print(int(fastcomm.cuda_kernels_compiled()))" 2>&1 | tail -n 1)
  if [[ $kernels != 1 ]]; then
    record kernels failed 0 "fastcomm.cuda_kernels_compiled() after the build: $kernels"
    gpu=""
  fi
fi

# 2-3. tests (pytest reports the GPU tests as skipped where no GPU is visible, so these run everywhere)
pytest=("$python" -m pytest -q -p no:cacheprovider -rfE)
run_step probes "$out/probes.log" "${pytest[@]}" tests/gpu/test_stream_order.py
run_step tests "$out/tests.log" "${pytest[@]}" tests/gpu --ignore=tests/gpu/test_stream_order.py

# 4. compute-sanitizer (on the H100 machines; it refuses the device on the H200 ones). The operators'
# tests only: NCCL's own kernels and the 2^31-element inputs are left out.
kernel_tests=(tests/gpu/test_compress_cuda.py tests/gpu/test_syncbn_cuda.py -k "not nccl and not hooks_on_cuda and not beyond")
for tool in memcheck racecheck; do
  if [[ -z $gpu ]]; then
    record "$tool" skipped 0 "no CUDA device visible"
  elif [[ -z $sanitizer ]]; then
    record "$tool" skipped 0 "compute-sanitizer not found"
  else
    # The caching allocator hides out-of-bounds accesses inside its blocks from memcheck.
    run_step "$tool" "$out/$tool.log" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
      "$sanitizer" --tool "$tool" --error-exitcode 86 "${pytest[@]}" -x "${kernel_tests[@]}"
  fi
done

# 5. benchmarks
if [[ -z $gpu ]]; then
  record benchmarks skipped 0 "no CUDA device visible"
else
  run_step benchmarks "$out/benchmarks.log" "$python" benchmarks/cuda_kernels.py --record "$out/cuda_kernels.json"
fi

echo
printf "$row_format\n" step outcome s detail
printf '%s\n' "${rows[@]}"
if [[ -s $out/benchmarks.log ]]; then
  echo
  cat "$out/benchmarks.log"
fi
printf '%s\n' "${rows[@]}" | grep -E '^[^ ]+ +(failed|timeout) ' >/dev/null && exit 1
exit 0
