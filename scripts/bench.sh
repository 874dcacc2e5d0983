#!/usr/bin/env bash
# Set up (as scripts/setup.sh) and run the main job: fastcomm against Gloo,
# side by side in one run, on 2 local CPU ranks: all_reduce from 8 B to 64 MiB,
# then DDP training steps of a CNN and a GPT (benchmarks/ddp_training.py --short).
# Each writes its JSON record into benchmarks/results/; benchmarks/render.py then
# turns the records into docs/benchmarks.md, its plots, and the README's
# headline table. Arguments go to the all_reduce benchmark (see
# python benchmarks/allreduce_vs_gloo.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python benchmarks/allreduce_vs_gloo.py "$@"
.venv/bin/python benchmarks/ddp_training.py --short
.venv/bin/python benchmarks/render.py
echo "records: benchmarks/results/allreduce_vs_gloo.json, benchmarks/results/ddp_training.json"
echo "rendered: docs/benchmarks.md (tables and plots), the README's headline table"
