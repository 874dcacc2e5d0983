#!/usr/bin/env bash
# Set up (as scripts/setup.sh) and run the main job: fastcomm against Gloo,
# side by side in one run, on 2 local CPU ranks: all_reduce from 8 B to 64 MiB,
# then DDP training steps of a CNN and a GPT (benchmarks/ddp_training.py --short,
# which also writes ddp_training.svg). Arguments go to the all_reduce benchmark
# (see python benchmarks/allreduce_vs_gloo.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python benchmarks/allreduce_vs_gloo.py "$@"
exec .venv/bin/python benchmarks/ddp_training.py --short
