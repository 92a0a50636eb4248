"""CI runs what the README says: set-up, then style (ruff), types (mypy), the docs build, the tests and examples."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEST_COMMAND = "bash scripts/setup.sh && bash scripts/test.sh"


def test_ci_runs_the_readme_test_command_in_a_fresh_venv():
    ci = (REPO / ".ci/run").read_text().splitlines()
    assert ci[-2:] == ["rm -rf .venv", TEST_COMMAND]
    assert TEST_COMMAND in (REPO / "README.md").read_text()


def test_the_test_command_checks_style_then_types_then_builds_the_docs_then_runs_pytest():
    commands = [line for line in (REPO / "scripts/test.sh").read_text().splitlines() if "$PYTHON" in line]
    assert commands == [
        '"$PYTHON" -m ruff check .',
        '"$PYTHON" -m mypy',
        'PYTHON="$PYTHON" bash scripts/docs.sh',
        '"$PYTHON" -m pytest "$@"',
    ]
    docs = (REPO / "scripts/docs.sh").read_text()
    assert "-m sphinx -E -W --keep-going -n" in docs  # warnings and broken references are errors


def test_pyproject_configures_ruff_mypy_and_the_wrappers_doctests():
    tomllib = pytest.importorskip("tomllib")
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert {"E", "F", "W", "I", "UP", "B"} <= set(config["tool"]["ruff"]["lint"]["select"])
    mypy = config["tool"]["mypy"]
    assert mypy["files"] == ["delayzoo"] and mypy["ignore_missing_imports"]
    wrappers = next(override for override in mypy["overrides"] if override["module"] == ["delayzoo.wrappers.*"])
    assert wrappers["disallow_untyped_defs"] and wrappers["check_untyped_defs"]
    pytest_options = config["tool"]["pytest"]["ini_options"]
    assert "delayzoo/wrappers" in pytest_options["testpaths"] and "--doctest-modules" in pytest_options["addopts"]
    extras = (REPO / "setup.cfg").read_text()
    assert "ruff" in extras and "mypy" in extras  # in the test extra that scripts/setup.sh installs


def test_ruff_finds_nothing():
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "."], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
