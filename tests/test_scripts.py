"""scripts/docs.sh and scripts/test.sh run ``$PYTHON``, else ``.venv/bin/python`` where it exists, else ``python3``.

Each case runs a copy of the scripts in a temporary folder, with stub interpreters that record their arguments
(``python3`` first on ``PATH``), and reads which one was called.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STUB = '#!/bin/sh\necho "{name} $*" >> "{log}"\n'


def _stub(path: Path, name: str, log: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(STUB.format(name=name, log=log))
    path.chmod(0o755)
    return path


def _run(tmp_path: Path, script: str, venv: bool, python: bool) -> list[str]:
    """The recorded calls of ``bash scripts/<script>`` in a copy of the repository's scripts folder."""
    log = tmp_path / "calls.log"
    shutil.copytree(REPO / "scripts", tmp_path / "clone" / "scripts")
    _stub(tmp_path / "bin" / "python3", "path-python3", log)
    if venv:
        _stub(tmp_path / "clone" / ".venv" / "bin" / "python", "venv-python", log)
    env = {key: value for key, value in os.environ.items() if key != "PYTHON"}
    env["PATH"] = f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}"
    if python:
        env["PYTHON"] = str(_stub(tmp_path / "chosen" / "python", "env-python", log))
    result = subprocess.run(
        ["bash", str(tmp_path / "clone" / "scripts" / script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return log.read_text().splitlines()


@pytest.mark.parametrize("script", ["docs.sh", "test.sh"])
@pytest.mark.parametrize(
    ("venv", "python", "expected"),
    [(False, False, "path-python3"), (True, False, "venv-python"), (True, True, "env-python")],
    ids=["python3-on-path", "venv", "PYTHON"],
)
def test_the_scripts_run_python_then_the_venv_then_python3_on_path(tmp_path, script, venv, python, expected):
    calls = _run(tmp_path, script, venv, python)
    assert calls and all(call.split()[0] == expected for call in calls), calls
    modules = [call.split()[2] for call in calls]  # "<name> -m <module> ..."
    assert modules == (["sphinx"] if script == "docs.sh" else ["ruff", "mypy", "sphinx", "pytest"])
