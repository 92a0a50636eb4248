#!/usr/bin/env bash
# Creates .venv (or reuses it) and installs delayzoo with its test, zoo (pandas, Optuna), ray (sweeps),
# minatar (the MinAtar games, GPL) and docs (Sphinx, to build the documentation) extras: what
# scripts/test.sh needs.
# torch is installed first from TORCH_SPEC (default: the 2.13.0 CPU build our machines keep on disk),
# so the library's torch range is already met and pip never pulls a multi-GB CUDA build by accident.
# On a GPU machine, set TORCH_SPEC to the CUDA build you want (e.g. TORCH_SPEC="torch==2.13.0").
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
PYTHON=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -c "import torch" 2>/dev/null || "$VENV/bin/python" -m pip install -q "$TORCH_SPEC"
"$VENV/bin/python" -m pip install -q -e ".[test,zoo,ray,minatar,docs]"
echo "delayzoo installed in $VENV ($("$VENV/bin/python" -c 'import delayzoo, torch; print("delayzoo", delayzoo.__version__, "torch", torch.__version__)'))"
