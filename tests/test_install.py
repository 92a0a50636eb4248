"""The package as users install it: a wheel built with ``python -m build``, in a fresh venv, run from elsewhere."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from delayzoo.zoo.runs import read_run_yaml

REPO = Path(__file__).resolve().parents[1]


def _run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode == 0, f"{command} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
def test_a_wheel_in_a_fresh_venv_trains_the_zoo_from_another_folder(tmp_path):
    started = time.monotonic()
    _run(sys.executable, "-m", "build", "--outdir", tmp_path / "dist", REPO, cwd=tmp_path)  # sdist, then its wheel
    built = time.monotonic()
    (wheel,) = (tmp_path / "dist").glob("delayzoo-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {
        "delayzoo/hyperparams/ppo.yml",
        "delayzoo/hyperparams/pwm.yml",
        "delayzoo/zoo/data/atari_100k_scores.csv",
        "delayzoo/wrappers/data/example_trace.csv",
    }
    assert shipped <= set(names)
    assert any(name.startswith("delayzoo/ctree/_ctree") for name in names)

    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    environ = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run(python, "-m", "pip", "install", "-q", os.environ.get("TORCH_SPEC", "torch==2.13.0"), cwd=tmp_path, env=environ)
    _run(python, "-m", "pip", "install", "-q", wheel, cwd=tmp_path, env=environ)
    installed = time.monotonic()

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    environ.update(OMP_NUM_THREADS="1")
    result = _run(python, "-m", "delayzoo.zoo.train", "--algo", "ppo", "--env", "CartPole-v1", "-n", "1000",
                  "--delay", "2", "--num-threads", "1", cwd=elsewhere, env=environ)
    trained = time.monotonic()
    assert f"{venv}/lib/" in result.stdout and "/site-packages/delayzoo/hyperparams/ppo.yml" in result.stdout
    run = elsewhere / "logs/ppo/CartPole-v1_1"
    assert (run / "CartPole-v1.zip").is_file() and read_run_yaml(run / "CartPole-v1/args.yml")["delay"] == 2
    print(f"build {built - started:.0f} s, venv + install {installed - built:.0f} s, train {trained - installed:.0f} s")
