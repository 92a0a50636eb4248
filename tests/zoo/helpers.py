"""Helpers for the zoo tests: run the command lines in a subprocess with one torch thread."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stable_baselines3.common.callbacks import BaseCallback

from delayzoo.zoo.sweep import saved_steps

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "TINY_PPO", "cli_env", "files_under", "run_module", "saved_steps"]


def cli_env() -> dict[str, str]:
    """The environment of a zoo subprocess: the repository importable, one thread per library."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    return env


def run_module(module: str, *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m module args...`` in ``cwd``; the completed process (output captured as text)."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, env=cli_env(), capture_output=True, text=True, timeout=timeout
    )


def files_under(folder: Path) -> list[str]:
    """Every path under ``folder`` (empty when it does not exist)."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*")) if folder.exists() else []


TINY_PPO = ["-params", "n_envs:1", "n_steps:64", "batch_size:64", "n_epochs:1"]
"""PPO settings small enough for a few hundred steps."""


class CountSteps(BaseCallback):
    """A callback of the user's own, outside the packages a file may name (it does nothing)."""

    def _on_step(self) -> bool:
        return True
