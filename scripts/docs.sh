#!/usr/bin/env bash
# Builds the documentation into docs/_build/html (open docs/_build/html/index.html), offline, failing on
# any warning: nitpicky mode (-n) makes every cross-reference to a delayzoo name that does not resolve an
# error, and MyST reports links to pages or headings that do not exist. Needs the docs extra
# (pip install -e ".[docs]"; scripts/setup.sh installs it). Arguments go to sphinx-build.
set -euo pipefail
cd "$(dirname "$0")/.."
# the interpreter: PYTHON when set, else the one scripts/setup.sh makes, else python3 on PATH (any other environment)
PYTHON=${PYTHON:-$([[ -x .venv/bin/python ]] && echo .venv/bin/python || echo python3)}
"$PYTHON" -m sphinx -E -W --keep-going -n -q -b html "$@" docs docs/_build/html
echo "docs built in docs/_build/html/index.html"
