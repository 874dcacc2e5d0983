#!/usr/bin/env bash
# Set up (as scripts/setup.sh) and run the main job: fastcomm against Gloo,
# side by side in one run, on 2 local CPU ranks. Arguments go to the benchmark
# (see python benchmarks/allreduce_vs_gloo.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python benchmarks/allreduce_vs_gloo.py "$@"
