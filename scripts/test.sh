#!/usr/bin/env bash
# What CI checks, in order: style (ruff), types (mypy), the documentation build (warnings are errors), then
# the tests, the wrappers' docstring examples and the examples of the README and docs/ (pytest; slow checks
# are deselected: pass -m slow to run them). Arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
# the interpreter: PYTHON when set, else the one scripts/setup.sh makes, else python3 on PATH (any other environment)
PYTHON=${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
"$PYTHON" -m ruff check .
"$PYTHON" -m mypy
PYTHON="$PYTHON" bash scripts/docs.sh
"$PYTHON" -m pytest "$@"
