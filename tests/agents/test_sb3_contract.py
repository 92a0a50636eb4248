"""The Stable-Baselines3 contract, checked the same way for both agents: learn, predict, save/load,
replay buffer save/load, callbacks (progress bar, tensorboard) and several envs."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from delayzoo import PWM, DelayedEZ
from delayzoo.agents.common.plain_save import UnsuitableEnvError
from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation

PWM_FAST = dict(
    buffer_size=400, learning_starts=16, batch_size=3, sequence_length=6, imagination_horizon=3,
    policy_kwargs=dict(
        world_model_kwargs=dict(stoch=4, classes=4, cnn_channels=(4, 8), mlp_units=16, mlp_layers=1, seq_width=16,
                                seq_cells=1, seq_divisor=2, reward_bins=21),
        actor_critic_kwargs=dict(units=16, layers=1, value_bins=21),
    ),
)
DEZ_FAST = dict(
    learning_starts=16, batch_size=4, num_simulations=3, replay_buffer_kwargs=dict(segment_length=8),
    lr_warmup_steps=10, reanalyze_ratio=0.5,
    target_update_interval=5,
    policy_kwargs=dict(net_kwargs=dict(latent_dim=8, hidden=(16,), head_hidden=(8,), lstm_hidden_size=8, proj_hidden=8,
                                       proj_out=8, pred_hidden=4, support_size=10)),
)
AGENTS: dict[str, tuple[type[BaseAlgorithm], dict[str, Any]]] = {
    "pwm": (PWM, PWM_FAST),
    "delayed_ez": (DelayedEZ, DEZ_FAST),
}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(params=sorted(AGENTS))
def make(request) -> Callable[..., BaseAlgorithm]:
    """``make(env=None, **overrides)``: a tiny agent on CartPole-v1 (seed 0, CPU)."""
    algorithm, fast = AGENTS[request.param]

    def build(env: Any = None, **overrides: Any) -> BaseAlgorithm:
        return algorithm("MlpPolicy", env or gym.make("CartPole-v1"), seed=0, device="cpu", **{**fast, **overrides})

    return build


class Recorder(KVWriter):
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def write(self, key_values, key_excluded, step=0):
        self.records.append(dict(key_values))


def test_is_an_sb3_off_policy_algorithm_whose_learn_returns_itself_and_logs(make):
    model = make()
    assert isinstance(model, OffPolicyAlgorithm)
    recorder = Recorder()
    model.set_logger(Logger(folder=None, output_formats=[recorder]))
    assert model.learn(48, log_interval=1) is model
    assert model.num_timesteps == 48 and model._n_updates > 0
    keys = set().union(*recorder.records)
    assert {"train/n_updates", "time/total_timesteps", "rollout/ep_rew_mean"} <= keys
    obs, _ = gym.make("CartPole-v1").reset(seed=0)
    action, state = model.predict(obs, deterministic=True)
    assert model.action_space.contains(int(action))
    actions, _ = model.predict(np.stack([obs, obs]), deterministic=True)
    assert actions.shape == (2,)


def test_save_load_gives_the_same_predictions_and_training_continues(make, tmp_path):
    model = make().learn(32)
    model.save(tmp_path / "model.zip")
    loaded = type(model).load(tmp_path / "model.zip", env=gym.make("CartPole-v1"), device="cpu")
    for name, tensor in model.policy.state_dict().items():
        torch.testing.assert_close(loaded.policy.state_dict()[name], tensor)
    assert loaded.num_timesteps == 32 and loaded._n_updates == model._n_updates
    assert loaded.train_freq == model.train_freq and loaded.batch_size == model.batch_size
    observations = [gym.make("CartPole-v1").reset(seed=seed)[0] for seed in range(4)]
    model.set_random_seed(7)
    loaded.set_random_seed(7)
    first = [model.predict(obs, deterministic=True)[0] for obs in observations]
    second = [loaded.predict(obs, deterministic=True)[0] for obs in observations]
    np.testing.assert_array_equal(first, second)
    loaded.learn(16, reset_num_timesteps=False)
    assert loaded.num_timesteps == 48 and loaded._n_updates > model._n_updates


def test_load_refuses_a_mismatched_env(make, tmp_path):
    make().save(tmp_path / "model.zip")
    with pytest.raises(ValueError, match="spaces do not match"):
        type(make()).load(tmp_path / "model.zip", env=gym.make("Acrobot-v1"))


class UndelayedView(gym.ObservationWrapper):
    """CartPole with the pending view's Dict space but no delay wrapper under it: PWM's forecast has no executed
    actions to learn from there."""

    def __init__(self) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.observation_space = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), 2)).observation_space

    def observation(self, observation):
        return {"observation": observation, "pending_actions": np.zeros(2, dtype=np.int64), "delay": 0}


def _accepted_and_refused(name: str) -> tuple[Callable[[], gym.Env], Callable[[], gym.Env], str, dict[str, Any]]:
    """An env each agent trains on and one with the same spaces that it refuses, with the words naming why."""
    if name == "pwm":
        return (lambda: PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), 2)), UndelayedView,
                "delay_mode='forecast' learns from the executed actions", dict(delay_mode="forecast"))
    return (lambda: gym.make("CartPole-v1"), lambda: ObservationDelay(gym.make("CartPole-v1"), 2),
            "DelayedEZ does not handle an ObservationDelay", {})


@pytest.mark.parametrize("name", sorted(AGENTS))
def test_the_constructor_set_env_and_load_refuse_the_same_env_naming_the_env(name, tmp_path):
    algorithm, fast = AGENTS[name]
    accepted, refused, why, settings = _accepted_and_refused(name)
    policy = "MultiInputPolicy" if name == "pwm" else "MlpPolicy"
    with pytest.raises(UnsuitableEnvError, match=why):
        algorithm(policy, refused(), seed=0, device="cpu", **fast, **settings)
    model = algorithm(policy, accepted(), seed=0, device="cpu", **fast, **settings)
    before = model.get_env()
    with pytest.raises(UnsuitableEnvError, match=why) as raised:
        model.set_env(refused())
    outer = type(refused()).__name__
    assert str(raised.value).startswith("the env <") and f"<{outer}<" in str(raised.value) and model.get_env() is before
    model.save(tmp_path / "model.zip")
    with pytest.raises(UnsuitableEnvError, match=why) as raised:
        algorithm.load(tmp_path / "model.zip", env=refused(), device="cpu")
    assert "not a delayzoo model file" not in str(raised.value) and f"<{outer}<" in str(raised.value)
    assert algorithm.load(tmp_path / "model.zip", env=accepted(), device="cpu").get_env() is not None


def test_replay_buffer_round_trips_with_the_same_signature(make, tmp_path):
    model = make().learn(40)
    model.save_replay_buffer(tmp_path / "buffer.npz")
    other = make()
    other.load_replay_buffer(tmp_path / "buffer.npz", truncate_last_traj=True)
    other.save_replay_buffer(tmp_path / "again.npz")
    with np.load(tmp_path / "buffer.npz") as first, np.load(tmp_path / "again.npz") as second:
        assert sorted(first.files) == sorted(second.files)
        for key in set(first.files) - {"next_is_first"}:  # PWM: the live env starts a new episode
            np.testing.assert_array_equal(first[key], second[key], err_msg=key)
    updates = other._n_updates
    other.learn(24, reset_num_timesteps=False)
    assert other._n_updates > updates


def test_callbacks_stop_training_progress_bar_and_tensorboard(make, tmp_path):
    class StopAfterTen(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.steps = 0

        def _on_step(self) -> bool:
            self.steps += 1
            return self.steps < 10

    callback = StopAfterTen()
    model = make(tensorboard_log=str(tmp_path))
    model.learn(50, callback=callback, progress_bar=True, log_interval=1)
    assert callback.steps == 10 and model.num_timesteps == 10
    assert any(tmp_path.rglob("events.out.tfevents*"))


def test_several_envs_step_together(make):
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    model = make(env, train_freq=(2, "step"))
    model.learn(40)
    assert model.n_envs == 2 and model.num_timesteps == 40 and model._n_updates > 0


class ThreeActions(gym.ActionWrapper):
    """CartPole with a third action (pushing left again): the same observations, another action count."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.action_space = gym.spaces.Discrete(3)

    def action(self, action: int) -> int:
        return int(action) % 2


def _buffer_state(model: BaseAlgorithm) -> Any:
    buffer = model.replay_buffer
    return (buffer, buffer.pos, buffer.actions.copy()) if hasattr(buffer, "pos") else (buffer, len(buffer))


@pytest.mark.parametrize("case", ["truncated", "pickle", "other agent", "other observations", "other action count"])
def test_a_replay_file_that_does_not_fit_is_refused_naming_it_and_nothing_is_loaded(make, case, tmp_path):
    model = make().learn(40)
    saved = tmp_path / "buffer.npz"
    model.save_replay_buffer(saved)
    if case == "truncated":
        saved.write_bytes(saved.read_bytes()[: saved.stat().st_size // 2])
        message = "is not a complete .npz archive"
    elif case == "pickle":
        saved.write_bytes(pickle.dumps({"pos": 1}))
        message = "holds pickled data"
    elif case == "other agent":
        other, fast = AGENTS["pwm" if isinstance(model, DelayedEZ) else "delayed_ez"]
        other("MlpPolicy", "CartPole-v1", seed=0, device="cpu", **fast).learn(40).save_replay_buffer(saved)
        message = f"holds the replay buffer of {other.__name__}, not one of {type(model).__name__}"
    target = make(ThreeActions(gym.make("CartPole-v1")) if case == "other action count" else
                  gym.make("Acrobot-v1") if case == "other observations" else None)
    if case == "other observations":
        message = r"observations of shape \(4,\), the model takes \(6,\)"
    elif case == "other action count":
        message = "2 actions, this model has 3|over 2 actions, the model has 3"
    target.learn(20)
    before = _buffer_state(target)
    with pytest.raises(ValueError, match=message) as error:
        target.load_replay_buffer(saved)
    assert str(saved) in str(error.value)
    after = _buffer_state(target)
    assert after[0] is before[0] and all(np.array_equal(a, b) for a, b in zip(after[1:], before[1:]))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_predict_names_the_non_finite_observation_entry(make, bad):
    model = make()
    observation = np.zeros((2, 4), dtype=np.float32)
    observation[1, 2] = bad
    with pytest.raises(ValueError, match=rf"non-finite observation passed to predict: entry \[1, 2\] .* is {bad}"):
        model.predict(observation)


def test_load_names_the_missing_path_as_given(make, tmp_path):
    with pytest.raises(FileNotFoundError) as error:
        type(make()).load(tmp_path / "nope.zip")
    assert f"'{tmp_path / 'nope.zip'}'" in str(error.value) and "nope.zip.zip" not in str(error.value)


def test_a_replay_file_saved_before_the_format_entry_still_loads(make, tmp_path):
    model = make().learn(40)
    model.save_replay_buffer(tmp_path / "buffer.npz")
    with np.load(tmp_path / "buffer.npz") as data:
        arrays = {name: data[name] for name in data.files if name != "format"}
    np.savez(tmp_path / "legacy.npz", **arrays)
    other = make()
    other.load_replay_buffer(tmp_path / "legacy.npz")
    other.save_replay_buffer(tmp_path / "again.npz")
    with np.load(tmp_path / "again.npz") as again:
        np.testing.assert_array_equal(again["rewards"], arrays["rewards"])
