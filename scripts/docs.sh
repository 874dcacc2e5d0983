#!/usr/bin/env bash
# Build the documentation site: bash scripts/docs.sh [VENV]
# Installs docs/requirements.txt into VENV (default .venv, made by
# scripts/setup.sh) and runs mkdocs with warnings as errors (a broken link, a
# page missing from the nav or an API name that no longer exists fails).
# The API reference is read from the sources, so no compiled fastcomm is needed.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-.venv}
if [[ ! -x "$venv/bin/python" ]]; then
  echo "docs: no virtual environment at $venv (run bash scripts/setup.sh, or name one)" >&2
  exit 1
fi
echo "== docs: installing docs/requirements.txt into $venv" >&2
"$venv/bin/python" -m pip install -q --disable-pip-version-check -r docs/requirements.txt
"$venv/bin/python" -m mkdocs build --strict --site-dir build/site
echo "== docs: site built in build/site (open build/site/index.html)" >&2
