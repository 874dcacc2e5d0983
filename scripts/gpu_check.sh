#!/usr/bin/env bash
# The CUDA path on a machine with a GPU, in one command:
#
#   bash scripts/gpu_check.sh [OUT_DIR]
#
#  1. build: fastcomm with its CUDA kernels, editable, into the Python that holds
#     torch (PYTHON, default python3; nothing is downloaded: the GPU machines
#     have no network). Only the visible GPU's architecture is compiled.
#  2. probes: tests/gpu/test_stream_order.py (stream ordering through NCCL).
#  3. tests: the rest of tests/gpu.
#  4. memcheck and racecheck: compute-sanitizer over the kernel tests (the
#     compression and SyncBatchNorm operators), each within a time limit.
#  5. benchmarks: benchmarks/cuda_kernels.py (record in OUT_DIR).
#
# Then one table: each step, its outcome and the seconds it took. Without a
# GPU (or without nvcc, or with a CPU build of torch) every step that needs
# one is reported as skipped and the script still runs to the end; a step that
# can run and fails or outlasts its limit makes the exit status 1. Logs go to
# OUT_DIR (default build/gpu_check).
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mkdir -p "${1:-build/gpu_check}" && cd "${1:-build/gpu_check}" && pwd)
python=${PYTHON:-python3}
if ! "$python" -c "import torch" 2>/dev/null && [[ -x .venv/bin/python ]]; then
  python=$PWD/.venv/bin/python  # a developer's machine: the README's environment
fi
sanitizer_limit=${FASTCOMM_SANITIZER_SECONDS:-240}

rows=()
record() {  # step, outcome, seconds, detail
  rows+=("$(printf '%-12s %-8s %6s  %s' "$1" "$2" "$3" "$4")")
}

# pytest's summary line ("3 passed, 2 skipped in 1.2s") from a log, without the time.
summary_of() {
  grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$1" | tail -n 1 | sed -E 's/=+//g; s/ in [0-9.]+s.*//; s/^ +//'
}

run_step() {  # name, log file, then the command: records its outcome with the seconds and pytest's summary
  local name=$1 log=$2 start=$SECONDS rc=0 summary
  shift 2
  "$@" >"$log" 2>&1 || rc=$?
  summary=$(summary_of "$log")
  if [[ $rc == 0 && $summary =~ ^[0-9]+\ skipped ]]; then  # pytest ran and every test skipped itself (no GPU)
    record "$name" skipped $((SECONDS - start)) "$summary"
  elif [[ $rc == 0 ]]; then
    record "$name" passed $((SECONDS - start)) "$summary"
  elif grep -q "Device not supported" "$log"; then  # compute-sanitizer on the H200 (gVisor) machines
    record "$name" skipped $((SECONDS - start)) "compute-sanitizer does not support this device"
  elif [[ $rc == 124 ]]; then
    record "$name" timeout $((SECONDS - start)) "$summary (stopped at its limit; log: $log)"
  else
    record "$name" failed $((SECONDS - start)) "$summary (exit $rc; log: $log)"
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
echo "== python: $python (torch ${torch_version:-missing}, CUDA ${torch_cuda:-none}); GPU: ${gpu:-none}; nvcc: ${nvcc:-none}"

# 1. build
if [[ -z $gpu ]]; then
  record build skipped 0 "no CUDA device visible"
elif [[ -z $torch_cuda || -z $nvcc ]]; then
  record build skipped 0 "needs a CUDA build of torch and nvcc"
elif ! "$python" -c "import setuptools, sys; sys.exit(int(setuptools.__version__.split('.')[0]) < 77)"; then
  record build failed 0 "setuptools 77 or newer is needed (pyproject.toml's licence): carry its wheel"
  gpu=""
elif [[ $("$nvcc" --version | sed -n 's/.*release \([0-9]*\)\..*/\1/p') != "${torch_cuda%%.*}" ]]; then
  record build failed 0 "nvcc's CUDA major version is not torch's (CUDA $torch_cuda)"
  gpu=""
else
  start=$SECONDS
  if FASTCOMM_CUDA=1 TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-${gpu%% *}} MAX_JOBS=${MAX_JOBS:-$(nproc)} \
    "$python" -m pip install -v --no-build-isolation --no-deps --no-index -e . >"$out/build.log" 2>&1; then
    record build passed $((SECONDS - start)) "torch $torch_version, arch ${gpu%% *}"
  else
    record build failed $((SECONDS - start)) "log: $out/build.log"
    gpu=""  # nothing below can run
  fi
fi
kernels=$(cd / && "$python" -c "import fastcomm; print(int(fastcomm.cuda_kernels_compiled()))" 2>/dev/null)
[[ -n $gpu && $kernels != 1 ]] && gpu=""

# 2-3. tests (pytest reports the GPU tests as skipped where no GPU is visible, so these run everywhere)
pytest=("$python" -m pytest -q -p no:cacheprovider -rfE)
run_step probes "$out/probes.log" "${pytest[@]}" tests/gpu/test_stream_order.py
run_step tests "$out/tests.log" "${pytest[@]}" tests/gpu --ignore=tests/gpu/test_stream_order.py

# 4. compute-sanitizer (on the H100 machines; it refuses the device on the H200 ones)
# The operators' tests only: NCCL's own kernels and the 2^31-element inputs are left out.
kernel_tests=(tests/gpu/test_compress_cuda.py tests/gpu/test_syncbn_cuda.py -k "not nccl and not hooks_on_cuda and not beyond")
for tool in memcheck racecheck; do
  if [[ -z $gpu ]]; then
    record "$tool" skipped 0 "no CUDA device visible"
  elif ! command -v compute-sanitizer >/dev/null; then
    record "$tool" skipped 0 "compute-sanitizer not found"
  else
    # The caching allocator hides out-of-bounds accesses inside its blocks from memcheck.
    run_step "$tool" "$out/$tool.log" env PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout "$sanitizer_limit" \
      compute-sanitizer --tool "$tool" --error-exitcode 86 "${pytest[@]}" -x "${kernel_tests[@]}"
  fi
done

# 5. benchmarks
if [[ -z $gpu ]]; then
  record benchmarks skipped 0 "no CUDA device visible"
else
  start=$SECONDS
  if "$python" benchmarks/cuda_kernels.py --record "$out/cuda_kernels.json" >"$out/benchmarks.log" 2>&1; then
    record benchmarks passed $((SECONDS - start)) "table: $out/benchmarks.log"
  else
    record benchmarks failed $((SECONDS - start)) "log: $out/benchmarks.log"
  fi
fi

echo
printf '%-12s %-8s %6s  %s\n' step outcome s detail
printf '%s\n' "${rows[@]}"
if [[ -s $out/benchmarks.log ]]; then
  echo
  cat "$out/benchmarks.log"
fi
printf '%s\n' "${rows[@]}" | grep -qE '^[^ ]+ +(failed|timeout) ' && exit 1
exit 0
