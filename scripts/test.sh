#!/usr/bin/env bash
# What CI checks, in order: style (ruff), types (mypy), then the tests and the wrappers' docstring
# examples (pytest; slow learning checks are deselected: pass -m slow to run them). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
"$PYTHON" -m ruff check .
"$PYTHON" -m mypy
"$PYTHON" -m pytest "$@"
