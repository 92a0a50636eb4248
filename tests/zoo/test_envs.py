"""The zoo's pieces in one process: delay settings, env factory, entry selection, algorithm table, run files."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest
from rl_zoo3.utils import ALGOS
from stable_baselines3 import PPO

from delayzoo.wrappers import ConstantDelay, ExecutionDelay, IIDDelay, PendingActionsObservation, RandomWalkDelay
from delayzoo.wrappers.life import LifeLossInfo
from delayzoo.wrappers.monitor import EpisodeMonitor
from delayzoo.zoo.algos import load_algorithm
from delayzoo.zoo.delay_settings import DelaySettings
from delayzoo.zoo.envs import check_env_id, env_kind, make_zoo_env
from delayzoo.zoo.errors import ZooError
from delayzoo.zoo.hyperparams import select_entry
from delayzoo.zoo.runs import read_run_yaml


def _stack(env: gym.Env) -> list[type]:
    kinds = []
    while isinstance(env, gym.Wrapper):
        kinds.append(type(env))
        env = env.env
    return kinds


def test_resolved_settings_write_out_the_process_defaults():
    walk = DelaySettings(delay=4, process="random-walk").resolved()
    assert (walk.p, walk.min_delay) == (0.2, 0)
    assert DelaySettings(delay=4, process="iid").resolved().min_delay == 0
    assert DelaySettings(delay=4).resolved() == DelaySettings(delay=4)
    assert walk.label() == "random-walk delay 0..4 p=0.2"
    assert DelaySettings().label() == "no delay"


@pytest.mark.parametrize(
    "settings, expected",
    [
        (DelaySettings(delay=3), ConstantDelay(3)),
        (DelaySettings(delay=3, process="random-walk", p=0.1, min_delay=1), RandomWalkDelay(3, p=0.1, min_delay=1)),
        (DelaySettings(delay=3, process="iid", min_delay=2), IIDDelay([2, 3])),
    ],
    ids=["constant", "random-walk", "iid"],
)
def test_settings_make_the_delay_process_they_describe(settings, expected):
    assert repr(settings.make_process()) == repr(expected)
    assert DelaySettings().make_process() is None


def test_flags_override_an_entry_key_by_key_and_a_new_process_drops_the_old_ones_parameters():
    entry = DelaySettings(delay=5, process="random-walk", p=0.3, min_delay=1, pending_view=True)
    assert entry.merged({"delay": 7}) == {"delay": 7, "process": "random-walk", "p": 0.3, "min_delay": 1,
                                          "pending_view": True, "init_action": "noop"}
    assert entry.merged({"process": "constant"}) == {"delay": 5, "process": "constant", "pending_view": True,
                                                     "init_action": "noop"}


def test_unknown_delay_entry_keys_are_named():
    with pytest.raises(ZooError, match=r"unknown delay setting\(s\) \['max_delay'\] in the entry"):
        DelaySettings.from_dict({"max_delay": 3}, "the entry")


def test_gym_ids_get_the_monitor_at_the_base_and_the_delay_on_top(tmp_path):
    settings = DelaySettings(delay=3, process="random-walk", pending_view=True)
    env = make_zoo_env("CartPole-v1", settings, monitor_file=str(tmp_path / "0"))
    kinds = _stack(env)
    assert kinds[:3] == [PendingActionsObservation, ExecutionDelay, EpisodeMonitor]
    assert isinstance(env.env.delay_process, RandomWalkDelay) and env.env.max_delay == 3
    env.reset(seed=0)
    steps, done = 0, False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        steps, done = steps + 1, terminated or truncated
    env.close()
    lines = (tmp_path / "0.monitor.csv").read_text().splitlines()
    assert lines[1] == "r,l,t" and int(lines[2].split(",")[1]) == steps


def test_ale_ids_go_through_make_atari_with_the_delay_below_the_life_loss_wrapper():
    env = make_zoo_env("ALE/Breakout-v5", DelaySettings(delay=2, pending_view=True))
    kinds = _stack(env)
    assert kinds.index(PendingActionsObservation) < kinds.index(LifeLossInfo) < kinds.index(ExecutionDelay)
    assert kinds.index(ExecutionDelay) < kinds.index(EpisodeMonitor)
    obs, info = env.reset(seed=0)
    assert obs["observation"].shape == (64, 64, 3) and info["delay"] == 2
    env.close()
    assert env_kind("ALE/Breakout-v5") == "atari" and env_kind("CartPole-v1") == "gym"


def test_dm_control_ids_go_through_make_dmc():
    env = make_zoo_env("dm_control/cartpole-swingup-v0", DelaySettings(delay=1))
    obs, info = env.reset(seed=0)
    assert obs.dtype == np.float32 and obs.shape == (5,) and info["delay"] == 1
    assert EpisodeMonitor in _stack(env) and env_kind("dm_control/cartpole-swingup-v0") == "dmc"
    env.close()
    with pytest.raises(ZooError, match="--pixels applies to dm_control/ ids"):
        make_zoo_env("CartPole-v1", pixels=True)


def test_minatar_ids_go_through_make_minatar_and_need_the_extra(monkeypatch):
    pytest.importorskip("minatar")
    check_env_id("MinAtar/Breakout-v1")  # registers MinAtar's ids
    env = make_zoo_env("MinAtar/Breakout-v1", DelaySettings(delay=2, pending_view=True))
    obs, info = env.reset(seed=0)
    assert obs["observation"].dtype == np.float32 and obs["observation"].shape == (4, 10, 10) and info["delay"] == 2
    assert _stack(env).index(ExecutionDelay) < _stack(env).index(EpisodeMonitor)
    assert env_kind("MinAtar/Breakout-v1") == "minatar"
    registry = {name: spec for name, spec in gym.registry.items() if not name.startswith("MinAtar/")}
    monkeypatch.setattr(gym.envs.registration, "registry", registry)
    monkeypatch.setattr(gym, "registry", registry)
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    with pytest.raises(ZooError, match='MinAtar games need the minatar package: pip install "delayzoo\\[minatar\\]"'):
        check_env_id("MinAtar/Breakout-v1")


def test_unknown_env_ids_get_close_registered_names():
    with pytest.raises(ZooError, match=r"did you mean 'ALE/Pong-v5'"):
        check_env_id("ALE/Pnog-v5")
    with pytest.raises(ZooError, match=r"unknown env 'zzzz': not in the Gymnasium registry$"):
        check_env_id("zzzz")


def test_entry_selection_follows_preset_then_id_then_fallbacks():
    content = {"CartPole-v1": {"a": 1}, "CartPole-v1@delayed": {"a": 2}, "atari": {"a": 3}, "dm_control": {"a": 4},
               "dm_control_pixels": {"a": 5}, "default": {"a": 6}}
    assert select_entry(content, "CartPole-v1", "gym") == ("CartPole-v1", {"a": 1})
    assert select_entry(content, "CartPole-v1", "gym", preset="delayed") == ("CartPole-v1@delayed", {"a": 2})
    assert select_entry(content, "ALE/Pong-v5", "atari")[0] == "atari"
    assert select_entry(content, "dm_control/walker-walk-v0", "dmc")[0] == "dm_control"
    assert select_entry(content, "dm_control/walker-walk-v0", "dmc", pixels=True)[0] == "dm_control_pixels"
    assert select_entry(content, "Acrobot-v1", "gym")[0] == "default"
    entry = select_entry(content, "CartPole-v1", "gym")[1]
    entry["a"] = 0
    assert content["CartPole-v1"] == {"a": 1}
    with pytest.raises(ZooError, match=r"none of the keys \['Acrobot-v1', 'default'\]"):
        select_entry({"CartPole-v1": {}}, "Acrobot-v1", "gym")


def test_algorithm_table_knows_sb3_names_and_registers_our_agents_on_demand():
    assert load_algorithm("ppo") is PPO
    with pytest.raises(ZooError, match=r"unknown algorithm 'delayed-ez'; did you mean 'delayed_ez'"):
        load_algorithm("delayed-ez")
    algorithm = load_algorithm("delayed_ez")
    assert ALGOS["delayed_ez"] is algorithm and algorithm.__name__ == "DelayedEZ"


def test_run_files_are_read_as_plain_data_only(tmp_path):
    ordered = tmp_path / "args.yml"
    ordered.write_text("!!python/object/apply:collections.OrderedDict\n- - - algo\n    - ppo\n  - - delay\n    - 3\n")
    assert read_run_yaml(ordered) == {"algo": "ppo", "delay": 3}
    hostile = tmp_path / "config.yml"
    hostile.write_text("!!python/object/apply:os.getcwd []\n")
    with pytest.raises(ZooError, match="is not plain YAML data"):
        read_run_yaml(hostile)


def test_eval_freq_envs_report_life_losses_as_episode_starts_and_score_whole_games(tmp_path):
    import argparse

    from stable_baselines3.common.callbacks import EvalCallback

    from delayzoo.agents.common.evaluation import LifeLossEpisodeStarts
    from delayzoo.zoo.exp_manager import DelayExperimentManager, ZooOptions

    manager = DelayExperimentManager(
        argparse.Namespace(), "ppo", "ALE/Breakout-v5", str(tmp_path), n_timesteps=1, eval_freq=100,
        hyperparams={"n_envs": 1}, seed=0, verbose=0, device="cpu", zoo=ZooOptions(),
    )
    manager.n_envs = 1
    manager.create_callbacks()
    (callback,) = [c for c in manager.callbacks if isinstance(c, EvalCallback)]
    env = callback.eval_env
    assert isinstance(env, LifeLossEpisodeStarts)
    env.seed(0)
    env.reset()
    for _ in range(2000):
        _, _, dones, infos = env.step(np.array([env.action_space.sample()]))
        if infos[0]["life_loss"]:
            break
    assert infos[0]["life_loss"] and dones[0] and "episode" not in infos[0]  # a start, not a game over
    env.close()
