#!/usr/bin/env bash
# The GPU check: one prepared run for a session that is lent a GPU, which measures in about 5 minutes the
# figures that need one and writes them to one JSON file (benchmarks/gpu_check.py says what is in it):
# PWM's paper-size training step, the DelayedEZ Atari update and batched acting on cuda, and the DelayedEZ
# Ray-actor figure where Ray imports (else a line saying it was skipped).
#
# Why it is prepared: the lent machine (one H200, 16 cores, Python 3.12 with torch) has no network and
# lacks gymnasium, Stable-Baselines3 and ale-py, device time is short (15 minutes a task, starts included),
# and at most 64 MiB travels with the repo. So the wheels are downloaded here, once, into a git-ignored
# folder carried along; there, only what is missing is installed (into a temporary --target, the
# machine's own packages untouched), the compiled tree is built in place, and a part that fails or runs
# past its limit records its error while the others still run.
#
#   bash benchmarks/gpu_check.sh --prepare          # here, with PyPI: the wheels into benchmarks/gpu_wheels (25 MB)
#   bash benchmarks/gpu_check.sh [-o FILE]          # on the GPU machine (default FILE: ${OUT:-.}/gpu_check.json)
#   bash benchmarks/gpu_check.sh --dry-run -o FILE  # any CPU, tiny sizes, the same parts (tests/benchmarks)
#
# The device tool's call, after --prepare (PYTHON defaults to python3, the machine's torch Python):
#   run(command="bash benchmarks/gpu_check.sh -o $OUT/gpu_check.json 2>&1 | tee $OUT/gpu_check.log",
#       carry=["benchmarks/gpu_wheels"], timeout_s=480)
# It should take 3 to 5 minutes; the set-up's and the parts' own limits add up to 9.5, and the file is
# rewritten after each part, so a run stopped at timeout_s still returns every figure that finished.
# --wheels DIR reads (or, with --prepare, fills) another folder.
set -euo pipefail

# module:pinned distribution, for every module the figures import that the lent machine may lack (torch
# and torch's own requirements are there wherever torch is); the versions are the ones CI tests with
BENCHMARK_NEEDS=(numpy:numpy==2.4.6 yaml:pyyaml==6.0.4 cloudpickle:cloudpickle==3.1.3
  farama_notifications:farama-notifications==0.0.6 gymnasium:gymnasium==1.4.0
  stable_baselines3:stable-baselines3==2.9.2 ale_py:ale-py==0.12.1)
BUILD_NEEDS=(Cython:cython==3.3.1 setuptools:setuptools==84.2.1)  # for the compiled tree only

usage() {
  echo "usage: bash benchmarks/gpu_check.sh [--prepare | --dry-run] [-o FILE] [--wheels DIR]"
}

PYTHON=${PYTHON:-python3}
MODE=gpu
OUTPUT=${OUT:-.}/gpu_check.json
WHEELS=benchmarks/gpu_wheels
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) MODE=prepare ;;
    --dry-run) MODE=dry-run ;;
    -o) OUTPUT=$2; shift ;;
    --wheels) WHEELS=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done
OUTPUT=$(realpath -m "$OUTPUT")
WHEELS=$(realpath -m "$WHEELS")
cd "$(dirname "$0")/.."

if [ "$MODE" = prepare ]; then
  mkdir -p "$WHEELS"
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$WHEELS" "${BENCHMARK_NEEDS[@]#*:}" "${BUILD_NEEDS[@]#*:}"
  du -sh "$WHEELS"
  ls "$WHEELS"
  exit
fi

export PYTHONUNBUFFERED=1
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT
export PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
SETUP=()  # what the set-up did, recorded in the file

# the distributions of those module:distribution pairs whose module Python cannot find
missing() {
  "$PYTHON" - "$@" <<'EOF'
import importlib.util, sys
print(" ".join(pair.split(":", 1)[1] for pair in sys.argv[1:] if importlib.util.find_spec(pair.split(":")[0]) is None))
EOF
}

# installs, from $WHEELS into $SITE, the distributions of the pairs given whose module is missing
install_missing() {
  local wanted
  wanted=$(missing "$@")
  [ -n "$wanted" ] || return 0
  echo "installing from $WHEELS: $wanted"
  # shellcheck disable=SC2086  # one word per distribution
  if timeout 60 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target "$SITE" --find-links "$WHEELS" $wanted >"$SITE/pip.log" 2>&1; then
    SETUP+=("installed from the wheels: $wanted")
  else
    SETUP+=("pip install of $wanted failed: $(tail -c 1500 "$SITE/pip.log")")
  fi
}

echo "$("$PYTHON" --version), $(command -v "$PYTHON"); $(nvidia-smi -L 2>/dev/null || echo 'nvidia-smi: none')"
install_missing "${BENCHMARK_NEEDS[@]}"
if "$PYTHON" -c "import delayzoo.ctree._ctree" 2>/dev/null; then
  SETUP+=("compiled tree already built")
else
  install_missing "${BUILD_NEEDS[@]}"
  started=$SECONDS
  if timeout 150 "$PYTHON" setup.py -q build_ext --inplace >"$SITE/build.log" 2>&1; then
    SETUP+=("compiled tree built in $((SECONDS - started)) s")
  else
    SETUP+=("compiled tree not built (the searches use the Python tree): $(tail -c 1500 "$SITE/build.log")")
  fi
fi
printf '%s\n' "${SETUP[@]}"

flags=()
for line in "${SETUP[@]}"; do flags+=(--setup "$line"); done
if [ "$MODE" = dry-run ]; then flags+=(--dry-run); fi
"$PYTHON" benchmarks/gpu_check.py -o "$OUTPUT" "${flags[@]}"
cat "$OUTPUT"
