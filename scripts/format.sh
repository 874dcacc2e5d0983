#!/usr/bin/env bash
# Formats the Python (ruff: format, then its lint rules) and the C++/CUDA
# (clang-format) sources with the settings in pyproject.toml [tool.ruff] and
# .clang-format.
#
#   bash scripts/format.sh           rewrite the files in place (and apply ruff's safe lint fixes)
#   bash scripts/format.sh --check   change nothing; exit 1 if a file would change or a lint rule fails
#
# The tools come from PyPI into the virtual environment (FASTCOMM_VENV, default
# .venv; made if missing), pinned to one minor version each: their output
# changes between versions, and --check must mean the same everywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${FASTCOMM_VENV:-.venv}
ruff_req="ruff>=0.17,<0.18"
clang_format_req="clang-format>=23.1,<23.2"
python_paths=(fastcomm tests benchmarks setup.py)

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

if [[ ! -x "$venv/bin/python" ]]; then
  "${PYTHON:-python3}" -m venv "$venv"
fi
# The pinned minor versions, or install them.
if ! "$venv/bin/python" - <<'PY' 2>/dev/null; then
import sys
from importlib.metadata import version
sys.exit(not (version("ruff").startswith("0.17.") and version("clang-format").startswith("23.1.")))
PY
  echo "== installing $ruff_req $clang_format_req into $venv" >&2
  "$venv/bin/pip" install -q --disable-pip-version-check "$ruff_req" "$clang_format_req"
fi
ruff=$venv/bin/ruff
clang_format=$venv/bin/clang-format

mapfile -t cxx_files < <(find csrc -type f \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)

if [[ $check == 1 ]]; then
  rc=0
  "$ruff" format --check --output-format concise "${python_paths[@]}" || rc=1
  "$ruff" check --output-format concise "${python_paths[@]}" || rc=1
  "$clang_format" --dry-run --Werror --ferror-limit=1 "${cxx_files[@]}" || rc=1
  if [[ $rc != 0 ]]; then
    echo "== check failed: bash scripts/format.sh formats the files and applies the safe lint fixes; fix the rest by hand" >&2
  fi
  exit $rc
fi
"$ruff" format "${python_paths[@]}"
"$clang_format" -i "${cxx_files[@]}"
if ! "$ruff" check --fix --output-format concise "${python_paths[@]}"; then
  echo "== formatted; the lint findings above remain to be fixed by hand" >&2
  exit 1
fi
