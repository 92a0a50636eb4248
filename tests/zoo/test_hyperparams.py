"""Which entry of which file a run uses, and every entry of our YAML files builds its model (construct only)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from gymnasium import spaces

from delayzoo.wrappers import IIDDelay, RandomWalkDelay, find_execution_delay
from delayzoo.zoo import train
from delayzoo.zoo.algos import load_algorithm
from delayzoo.zoo.errors import ZooError
from delayzoo.zoo.exp_manager import DelayExperimentManager, ZooOptions
from delayzoo.zoo.hyperparams import find_entry, hyperparams_dir, load_hyperparams_file, rl_zoo3_hyperparams_dir
from delayzoo.zoo.runs import read_run_yaml
from tests.zoo.helpers import saved_steps

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


def test_our_entries_take_precedence_and_rl_zoo3_fills_in(tmp_path, monkeypatch):
    monkeypatch.setenv("DELAYZOO_HYPERPARAMS", str(tmp_path))
    (tmp_path / "ppo.yml").write_text("CartPole-v1: {n_steps: 7}\natari: {n_steps: 8}\n")
    theirs = rl_zoo3_hyperparams_dir()
    ours_first = find_entry("ppo", "CartPole-v1", "gym")
    assert (ours_first.path, ours_first.key) == (tmp_path / "ppo.yml", "CartPole-v1")
    assert ours_first.hyperparams == {"n_steps": 7}
    acrobot = find_entry("ppo", "Acrobot-v1", "gym")
    assert (acrobot.path, acrobot.key) == (theirs / "ppo.yml", "Acrobot-v1")
    assert acrobot.hyperparams == load_hyperparams_file(theirs / "ppo.yml")["Acrobot-v1"]
    assert find_entry("ppo", "ALE/Pong-v5", "atari").path == tmp_path / "ppo.yml"  # our fallback beats theirs
    a2c_atari = find_entry("a2c", "ALE/Pong-v5", "atari")  # no a2c.yml of ours
    assert (a2c_atari.path, a2c_atari.key) == (theirs / "a2c.yml", "atari")
    assert "env_wrapper" not in a2c_atari.hyperparams and a2c_atari.hyperparams["frame_stack"] == 4  # make_atari's job
    with pytest.raises(ZooError, match="no preset 'x'"):
        find_entry("ppo", "CartPole-v1", "gym", preset="x")
    with pytest.raises(ZooError, match="no hyperparameter file for 'td3'"):
        find_entry("td3", "Pendulum-v1", "gym", preset="delayed")
    assert find_entry("td3", "CartPole-v1", "gym").key == "default"  # rl_zoo3's own fallback
    with pytest.raises(ZooError, match="no hyperparameters for --algo nope --env CartPole-v1"):
        find_entry("nope", "CartPole-v1", "gym")
    custom = tmp_path / "custom.yml"
    custom.write_text("default: {n_steps: 9}\n")
    assert find_entry("ppo", "Acrobot-v1", "gym", config=str(custom)).hyperparams == {"n_steps": 9}  # -conf: only it


def test_the_yaml_files_ship_inside_the_package():
    import delayzoo

    assert hyperparams_dir() == Path(delayzoo.__file__).parent / "hyperparams"
    names = {path.stem for path in hyperparams_dir().glob("*.yml")}
    assert {"ppo", "dqn", "qrdqn", "sac", "pwm", "delayed_ez"} <= names


@pytest.mark.parametrize(
    "algo, env_id, flags",
    [("a2c", "CartPole-v1", []), ("td3", "Pendulum-v1", ["--delay", "2", "--pending-view"]),
     ("ddpg", "Pendulum-v1", ["--delay", "1"]), ("ppo", "Acrobot-v1", [])],
)
def test_rl_zoo3_algorithms_and_envs_train_without_conf(algo, env_id, flags, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    small = ["learning_starts:32", "buffer_size:1000"] if algo in ("td3", "ddpg") else ["n_envs:1", "n_steps:32"]
    argv = ["--algo", algo, "--env", env_id, "-n", "64", "--eval-freq", "-1", "--num-threads", "1", "-f", "logs",
            *flags, "-params", *small]
    if algo == "ppo":
        argv += ["batch_size:32", "n_epochs:1"]
    assert train.main(argv) == 0
    args = read_run_yaml(tmp_path / f"logs/{algo}/{env_id}_1/{env_id}/args.yml")
    assert args["hyperparams_file"] == str(rl_zoo3_hyperparams_dir() / f"{algo}.yml")
    assert args["hyperparams_entry"] == env_id and args["delay"] == (int(flags[1]) if flags else None)
    assert saved_steps(tmp_path / f"logs/{algo}/{env_id}_1/{env_id}.zip") >= 64
