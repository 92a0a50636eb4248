"""The zoo tests' shared PPO run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.zoo.helpers import TINY_PPO, run_module


@pytest.fixture(scope="session")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``logs/`` of a 256-step PPO run on CartPole-v1 (no delay), checkpoints every 128 steps."""
    folder = tmp_path_factory.mktemp("ppo_run")
    result = run_module(
        "delayzoo.zoo.train", "--algo", "ppo", "--env", "CartPole-v1", "-n", "256", "--seed", "0",
        "--eval-freq", "128", "--eval-episodes", "2", "--save-freq", "128", "--num-threads", "1", "-f", "logs",
        *TINY_PPO, cwd=folder,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return folder
