"""make_minatar: MinAtar's boolean frames as float channels-first images, under delays and SB3's stacking."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import DummyVecEnv, VecFrameStack

from delayzoo.wrappers import RandomWalkDelay
from delayzoo.wrappers.minatar import MinAtarObservation, make_minatar, register_minatar_envs

pytest.importorskip("minatar")


def test_frames_are_the_games_boolean_channels_as_float32_channels_first():
    register_minatar_envs()
    raw = gym.make("MinAtar/Breakout-v1")
    env = make_minatar("MinAtar/Breakout-v1", monitor=False)
    assert env.observation_space == spaces.Box(0.0, 1.0, (4, 10, 10), np.float32)
    assert env.action_space == spaces.Discrete(3)  # -v1: the minimal action set
    frame, _ = raw.reset(seed=3)
    obs, _ = env.reset(seed=3)
    assert raw.observation_space.dtype == np.bool_ and frame.shape == (10, 10, 4)
    np.testing.assert_array_equal(obs, np.transpose(frame, (2, 0, 1)).astype(np.float32))
    for _ in range(20):
        frame, reward, *_ = raw.step(1)
        obs, reward_, *_ = env.step(1)
        np.testing.assert_array_equal(obs, np.transpose(frame, (2, 0, 1)).astype(np.float32))
        assert reward == reward_


def test_sb3s_checker_passes_and_a_seed_repeats_the_game():
    sb3_check_env(make_minatar("MinAtar/Breakout-v1"), warn=False)
    sb3_check_env(make_minatar("MinAtar/Breakout-v1", delay=RandomWalkDelay(5), pending_view=True), warn=False)
    games = []
    for _ in range(2):
        env = make_minatar("MinAtar/Breakout-v1", delay=RandomWalkDelay(5), init_action="random")
        env.action_space.seed(0)
        frames = [env.reset(seed=11)[0]]
        for _ in range(50):
            obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
            frames.append(obs)
            if terminated or truncated:
                break
        games.append(np.stack(frames))
    np.testing.assert_array_equal(*games)


def test_delay_and_pending_view_sit_over_the_float_frames_and_scores_are_whole_episodes():
    delay = RandomWalkDelay(max_delay=5)
    env = make_minatar("MinAtar/Breakout-v1", delay=delay, pending_view=True, init_action="random")
    obs, info = env.reset(seed=0)
    assert obs["observation"].dtype == np.float32 and obs["observation"].shape == (4, 10, 10)
    assert info["delay"] == 5 and obs["pending_actions"].shape == (5,)
    steps = 0
    while True:
        obs, _, terminated, truncated, info = env.step(env.action_space.sample())
        steps += 1
        if terminated or truncated:
            break
    assert info["episode"]["l"] == steps


def test_episodes_are_truncated_at_max_episode_steps():
    env = make_minatar("MinAtar/Freeway-v1", max_episode_steps=7)
    env.reset(seed=0)
    for step in range(7):
        _, _, terminated, truncated, _ = env.step(0)
        assert not terminated and truncated == (step == 6)


def test_frame_stacking_keeps_float_frames_without_a_dtype_error():
    venv = VecFrameStack(DummyVecEnv([lambda: make_minatar("MinAtar/Breakout-v1")] * 2), 4, channels_order="first")
    obs = venv.reset()
    assert obs.shape == (2, 16, 10, 10) and obs.dtype == np.float32
    obs, *_ = venv.step(np.array([0, 1]))
    assert obs.shape == (2, 16, 10, 10)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="MinAtar id such as 'MinAtar/Breakout-v1', got 'CartPole-v1'"):
        make_minatar("CartPole-v1")
    with pytest.raises(ValueError, match="unknown MinAtar game 'MinAtar/Pong-v1'"):
        make_minatar("MinAtar/Pong-v1")
    with pytest.raises(ValueError, match="pending_view=True needs a delay"):
        make_minatar("MinAtar/Breakout-v1", pending_view=True)
    with pytest.raises(ValueError, match="needs \\(H, W, C\\) Box observations"):
        MinAtarObservation(gym.make("CartPole-v1"))


def test_without_the_package_the_error_names_the_extra(monkeypatch):
    registry = {name: spec for name, spec in gym.registry.items() if not name.startswith("MinAtar/")}
    monkeypatch.setattr(gym.envs.registration, "registry", registry)
    monkeypatch.setattr(gym, "registry", registry)
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    with pytest.raises(ImportError, match=r'pip install "delayzoo\[minatar\]"'):
        make_minatar("MinAtar/Breakout-v1")
