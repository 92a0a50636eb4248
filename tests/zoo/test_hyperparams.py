"""Every entry of every YAML file in hyperparams/ builds its model for its env (construct only)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from delayzoo.wrappers import IIDDelay, RandomWalkDelay, find_execution_delay
from delayzoo.zoo.algos import load_algorithm
from delayzoo.zoo.exp_manager import DelayExperimentManager, ZooOptions
from delayzoo.zoo.hyperparams import hyperparams_dir, load_hyperparams_file
from delayzoo.zoo.runs import read_run_yaml

FALLBACK_ENVS = {
    "atari": ("ALE/Pong-v5", False),
    "dm_control": ("dm_control/cartpole-swingup-v0", False),
    "dm_control_pixels": ("dm_control/cartpole-swingup-v0", True),
    "default": ("CartPole-v1", False),
}
"""The env each fallback entry is built for."""


def _entries() -> list:
    return [
        pytest.param(path, key, id=f"{path.stem}:{key}")
        for path in sorted(hyperparams_dir().glob("*.yml"))
        for key in load_hyperparams_file(path)
    ]


def _manager(path: Path, key: str, log_folder: Path) -> DelayExperimentManager:
    env_id, _, preset = key.partition("@")
    env_id, pixels = FALLBACK_ENVS.get(env_id, (env_id, False))
    return DelayExperimentManager(
        argparse.Namespace(), path.stem, env_id, str(log_folder), n_timesteps=1, eval_freq=-1,
        hyperparams={"n_envs": 1}, seed=0, verbose=0, device="cpu", config=str(path),
        zoo=ZooOptions(preset=preset or None, pixels=pixels),
    )


def test_the_yaml_files_cover_the_baselines_and_their_envs():
    keys = {path.stem: set(load_hyperparams_file(path)) for path in hyperparams_dir().glob("*.yml")}
    assert {"CartPole-v1", "CartPole-v1@delayed", "Pendulum-v1", "atari", "dm_control", "dm_control_pixels"} <= set(
        keys["ppo"]
    )
    assert {"CartPole-v1", "CartPole-v1@delayed", "atari"} <= keys["dqn"]
    assert {"CartPole-v1", "atari"} <= keys["qrdqn"]
    assert {"Pendulum-v1", "dm_control", "dm_control_pixels"} <= keys["sac"]
    assert {"CartPole-v1", "CartPole-v1@delayed", "Pendulum-v1", "atari"} <= keys["pwm"]


@pytest.mark.filterwarnings("ignore:You have specified a mini-batch size")  # n_envs=1 instead of the entry's
@pytest.mark.parametrize("path, key", _entries())
def test_every_yaml_entry_builds_its_model(path, key, tmp_path):
    algorithm = load_algorithm(path.stem)
    manager = _manager(path, key, tmp_path)
    model, saved = manager.setup_experiment()
    try:
        assert isinstance(model, algorithm) and model.n_envs == 1
        assert saved["delay"] == manager.delay.to_record()
        if manager.delay.pending_view:
            assert isinstance(model.observation_space, spaces.Dict)
        if hasattr(model, "delay_mode"):  # PWM: forecast with the pending view, recorded in config.yml
            assert saved["delay_mode"] == model.delay_mode
            assert model.delay_mode == ("forecast" if manager.delay.pending_view else "oblivious")
        if manager.zoo.pixels or manager.kind == "atari":
            side = 96 if manager.env_kwargs.get("protocol") == "efficientzero" else 64
            assert model.observation_space.dtype == np.uint8 and model.observation_space.shape[1:] == (side, side)
    finally:
        model.env.close()


@pytest.mark.filterwarnings("ignore:You have specified a mini-batch size")
def test_preset_entry_sets_the_delay_and_flags_override_it(tmp_path):
    path = hyperparams_dir() / "ppo.yml"
    manager = _manager(path, "CartPole-v1@delayed", tmp_path / "preset")
    model, _ = manager.setup_experiment()
    process = find_execution_delay(model.env.envs[0]).delay_process
    model.env.close()
    assert isinstance(process, RandomWalkDelay) and (process.max_delay, process.p, process.min_delay) == (5, 0.2, 0)
    recorded = read_run_yaml(Path(manager.params_path) / "config.yml")["delay"]
    assert recorded == {"delay": 5, "process": "random-walk", "p": 0.2, "min_delay": 0, "pending_view": True,
                        "init_action": "noop"}
    assert model.observation_space["pending_actions"].shape == (5,)

    overridden = _manager(path, "CartPole-v1@delayed", tmp_path / "override")
    overridden.zoo = ZooOptions(delay_flags={"delay": 2, "process": "iid"}, preset="delayed")
    model, _ = overridden.setup_experiment()
    process = find_execution_delay(model.env.envs[0]).delay_process
    model.env.close()
    assert isinstance(process, IIDDelay) and process.values.tolist() == [0, 1, 2]
    assert overridden.delay.to_record() == {"delay": 2, "process": "iid", "p": None, "min_delay": 0,
                                            "pending_view": True, "init_action": "noop"}
    assert model.observation_space["pending_actions"].shape == (2,)
