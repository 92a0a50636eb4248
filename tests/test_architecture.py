"""The package's architecture (DESIGN.md section 1) as import-linter's contracts in ``.importlinter``: the zoo above
the agents above the wrappers and the tree, PWM and DelayedEZ independent, wrappers and the zoo's delay settings
free of torch and Stable-Baselines3 (but for the SB3 ``Monitor`` the wrappers re-export), and no import cycle
between the modules of a package. ``lint-imports`` prints the same report; here it runs in a process of its own."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def test_the_import_contracts_are_kept():
    pytest.importorskip("importlinter")
    result = subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache", str(REPO / ".importlinter")], cwd=REPO, capture_output=True,
        text=True, timeout=300,
    )
    assert result.returncode == 0 and "5 kept, 0 broken" in result.stdout, result.stdout + result.stderr
