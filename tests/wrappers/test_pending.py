"""PendingActionsObservation: the Dict view of the delay queue, and its use under SB3 algorithms."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation, RandomWalkDelay


def test_observation_holds_the_unchanged_obs_the_padded_queue_and_the_delay():
    base = gym.make("CartPole-v1")
    env = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(4, p=0.5)))
    obs, info = env.reset(seed=0)
    base_obs, _ = base.reset(seed=0)
    np.testing.assert_array_equal(obs["observation"], base_obs)
    for a in [1, 0, 1, 1, 0, 1, 0, 0, 1, 1]:
        obs, *_, info = env.step(a)
        d = info["delay"]
        assert obs["delay"] == d
        np.testing.assert_array_equal(obs["pending_actions"], info["pending_actions"])
        assert not obs["pending_actions"][d:].any()
        assert obs["pending_actions"].shape == (4,)


def test_discrete_actions_with_a_start_are_stored_as_indices():
    env = PendingActionsObservation(_shifted_env())
    obs, _ = env.reset(seed=0)
    env.step(-1)
    obs, *_ = env.step(0)
    assert obs["pending_actions"].tolist() == [0, 1]
    assert env.observation_space["pending_actions"].contains(obs["pending_actions"])


def _shifted_env() -> gym.Env:
    class Shifted(gym.Env):
        action_space = spaces.Discrete(2, start=-1)
        observation_space = spaces.Box(-1, 1, shape=(1,), dtype=np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(1, dtype=np.float32), {}

        def step(self, action):
            return np.zeros(1, dtype=np.float32), 0.0, False, False, {}

    return ExecutionDelay(Shifted(), 2)


@pytest.mark.parametrize("env_id, delay", [("CartPole-v1", 3), ("Pendulum-v1", 2), ("CartPole-v1", 0)])
def test_gymnasium_and_sb3_env_checkers_pass(env_id, delay):
    env = PendingActionsObservation(ExecutionDelay(gym.make(env_id), RandomWalkDelay(delay, p=0.2)))
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env, warn=False)
    sb3_check_env(ExecutionDelay(gym.make(env_id), delay), warn=False)


def test_without_an_execution_delay_below_it_raises_naming_the_stack():
    with pytest.raises(ValueError, match="needs an ExecutionDelay below it.*CartPole-v1"):
        PendingActionsObservation(gym.make("CartPole-v1"))


def test_finds_the_delay_wrapper_under_other_wrappers():
    env = PendingActionsObservation(Monitor(ExecutionDelay(gym.make("CartPole-v1"), 2)))
    obs, _ = env.reset(seed=0)
    assert obs["delay"] == 2


def test_ppo_multi_input_policy_runs_on_the_pending_view():
    env = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(3, p=0.2)))
    model = PPO("MultiInputPolicy", env, n_steps=64, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.learn(128)
    action, _ = model.predict(env.reset(seed=1)[0], deterministic=True)
    assert env.action_space.contains(int(action))


def _train_and_evaluate(pending_view: bool, steps: int, seed: int) -> float:
    def make() -> gym.Env:
        env = ExecutionDelay(Monitor(gym.make("CartPole-v1")), RandomWalkDelay(max_delay=5, p=0.2))
        return PendingActionsObservation(env) if pending_view else env

    policy = "MultiInputPolicy" if pending_view else "MlpPolicy"
    model = PPO(policy, make(), seed=seed, device="cpu", n_steps=512, batch_size=64, learning_rate=1e-3)
    model.learn(steps)
    eval_env = make()
    eval_env.reset(seed=seed + 1000)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=20, deterministic=True)
    return float(mean)


@pytest.mark.slow
def test_ppo_with_the_pending_view_beats_ppo_without_it_under_delay():
    with_view = _train_and_evaluate(True, 40_000, seed=0)
    without_view = _train_and_evaluate(False, 40_000, seed=0)
    print(f"PPO on CartPole-v1, RandomWalkDelay(5): with pending view {with_view:.1f}, without {without_view:.1f}")
    assert with_view > without_view + 100


@pytest.mark.parametrize("env_id, algorithm", [("CartPole-v1", PPO), ("Pendulum-v1", SAC), ("CartPole-v1", DQN)])
def test_at_max_delay_0_the_queue_view_is_one_constant_slot_and_sb3_trains_on_it(env_id, algorithm):
    env = PendingActionsObservation(ExecutionDelay(gym.make(env_id), 0))
    space = env.observation_space
    assert space["pending_actions"].shape == (int(np.prod(env.action_space.shape)) or 1,)
    assert space["delay"] == spaces.Discrete(1)
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        assert space.contains(obs) and not obs["pending_actions"].any() and obs["delay"] == 0
        obs, *_ = env.step(env.action_space.sample())
    kwargs = {"n_steps": 32, "batch_size": 32, "n_epochs": 1} if algorithm is PPO else {"learning_starts": 16}
    model = algorithm("MultiInputPolicy", env, seed=0, device="cpu", **kwargs).learn(64)
    action, _ = model.predict(env.reset(seed=1)[0], deterministic=True)
    assert env.action_space.contains(action if isinstance(action, np.ndarray) and action.ndim else int(action))


class _Steps(gym.Env):
    """Observation: the step count; any of 10 actions."""

    action_space = spaces.Discrete(10)
    observation_space = spaces.Box(0, 1000, shape=(1,), dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t], dtype=np.float32), 1.0, False, False, {}


def test_over_both_delays_the_view_holds_the_unobserved_then_the_queued_actions():
    env = PendingActionsObservation(ObservationDelay(ExecutionDelay(_Steps(), 2), 1))
    space = env.observation_space
    assert space["pending_actions"] == spaces.MultiDiscrete([10] * 3)
    assert (space["delay"], space["obs_delay"]) == (spaces.Discrete(3), spaces.Discrete(2))
    obs, _ = env.reset(seed=0)
    views = [(obs["pending_actions"].tolist(), obs["obs_delay"], obs["delay"])]
    for action in (3, 1, 4, 5):
        obs, *_ = env.step(action)
        views.append((obs["pending_actions"].tolist(), obs["obs_delay"], obs["delay"]))
        assert space.contains(obs)
    # executed: 0, 0 (the fillers), 3, 1; each observation one step late
    assert views == [([0, 0, 0], 0, 2), ([0, 0, 3], 1, 2), ([0, 3, 1], 1, 2), ([3, 1, 4], 1, 2), ([1, 4, 5], 1, 2)]


def test_over_an_observation_delay_alone_the_delay_is_always_0():
    env = PendingActionsObservation(ObservationDelay(_Steps(), 3))
    space = env.observation_space
    assert sorted(space) == ["delay", "obs_delay", "observation", "pending_actions"]
    assert space["delay"] == spaces.Discrete(1) and space["obs_delay"] == spaces.Discrete(4)
    env.reset(seed=0)
    views = [env.step(action)[0] for action in (7, 8, 9, 6)]
    assert [(v["pending_actions"].tolist(), v["obs_delay"], v["delay"]) for v in views] == [
        ([7, 0, 0], 1, 0), ([7, 8, 0], 2, 0), ([7, 8, 9], 3, 0), ([8, 9, 6], 3, 0)
    ]
    assert [int(v["observation"][0]) for v in views] == [0, 0, 0, 1]


def test_box_actions_over_both_delays_are_flattened_oldest_first():
    env = PendingActionsObservation(ObservationDelay(ExecutionDelay(gym.make("Pendulum-v1"), 1), 2))
    assert env.observation_space["pending_actions"].shape == (3,)
    env.reset(seed=0)
    for action in (0.5, -1.0, 1.5):
        obs, *_ = env.step(np.array([action], dtype=np.float32))
    np.testing.assert_array_equal(obs["pending_actions"], np.array([0.5, -1.0, 1.5], dtype=np.float32))
    gym_check_env(env, skip_render_check=True)
    sb3_check_env(env, warn=False)
