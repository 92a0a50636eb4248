"""LifeLossInfo and EpisodicLife on a real ALE game with lives (Breakout), and per-game scores."""

from __future__ import annotations

from typing import Any

import ale_py
import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from delayzoo.wrappers.atari import make_atari
from delayzoo.wrappers.life import EpisodicLife, LifeLossInfo

gym.register_envs(ale_py)

FIRE, RIGHT, LEFT = 1, 2, 3


class CountResets(gym.Wrapper):
    """Counts the calls to ``reset`` and ``step`` that reach the env below it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.resets = 0
        self.steps = 0

    def reset(self, **kwargs: Any):
        self.resets += 1
        return self.env.reset(**kwargs)

    def step(self, action):
        self.steps += 1
        return self.env.step(action)


class ScriptedLives(gym.Env):
    """Reports a given sequence of lives counts: ``lives[0]`` on reset, ``lives[t]`` at step ``t``."""

    observation_space = spaces.Discrete(1)
    action_space = spaces.Discrete(1)

    def __init__(self, lives: list[int]) -> None:
        self.lives = lives
        self.t = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {"lives": self.lives[0]}

    def step(self, action):
        self.t += 1
        return 0, 0.0, self.t == len(self.lives) - 1, False, {"lives": self.lives[self.t]}


def breakout() -> gym.Env:
    return gym.make("ALE/Breakout-v5")


def play(env: gym.Env, seed: int = 0):
    """Yield ``(step result, lives read from the emulator)`` for a random policy until the env says stop."""
    rng = np.random.default_rng(seed)
    while True:
        result = env.step(int(rng.choice([FIRE, RIGHT, LEFT])))
        yield result, env.unwrapped.ale.lives()
        if result[2] or result[3]:
            return


def test_life_loss_is_flagged_exactly_where_the_emulator_lives_counter_drops():
    env = LifeLossInfo(breakout())
    _, info = env.reset(seed=0)
    assert info["life_loss"] is False
    previous = env.unwrapped.ale.lives()
    flags, drops = [], []
    for (_, _, terminated, truncated, info), lives in play(env):  # noqa: B007 (the last step is checked below)
        flags.append(info["life_loss"])
        drops.append(lives < previous)
        previous = lives
    assert terminated and not truncated
    assert flags == drops
    assert sum(flags) == 5  # Breakout: five lives, the last one lost on the game-over step


def test_life_loss_follows_the_lives_counter_both_ways():
    env = LifeLossInfo(ScriptedLives([3, 2, 2, 3, 2, 4, 4, 1, 0]))
    _, info = env.reset()
    flags = [info["life_loss"]]
    terminated = False
    while not terminated:
        _, _, terminated, _, info = env.step(0)
        flags.append(info["life_loss"])
    assert flags == [False, True, False, False, True, False, False, True, True]


def test_life_loss_info_without_a_lives_counter_raises_naming_the_missing_key():
    env = LifeLossInfo(gym.make("CartPole-v1"))
    with pytest.raises(ValueError, match="lives"):
        env.reset(seed=0)


def test_episodic_life_ends_the_episode_on_a_life_loss_and_reset_continues_the_same_game():
    counter = CountResets(breakout())
    env = EpisodicLife(counter)
    env.reset(seed=0)
    assert counter.resets == 1
    episodes, lives_at_start = 0, []
    while True:
        lives_at_start.append(env.unwrapped.ale.lives())
        for (obs, _, terminated, truncated, info), lives in play(env, seed=episodes):  # noqa: B007 (the last step is checked below)
            assert terminated == (info["life_loss"] or lives == 0)
        episodes += 1
        steps_before = counter.steps
        frame = info["episode_frame_number"]
        next_obs, next_info = env.reset()
        if lives == 0:
            break
        # a continuation: no reset and no step below, the game's last frame and lives carry on
        assert counter.resets == 1 and counter.steps == steps_before
        np.testing.assert_array_equal(next_obs, obs)
        assert next_info["lives"] == lives and next_info["episode_frame_number"] == frame > 0
        assert next_info["life_loss"] is False
    assert episodes == 5
    assert lives_at_start == [5, 4, 3, 2, 1]
    # after game over, reset starts a new game
    assert counter.resets == 2
    assert next_info["lives"] == 5 and next_info["episode_frame_number"] == 0


@pytest.mark.parametrize("reset_kwargs", [{"seed": 1}, {"options": {}}])
def test_episodic_life_reset_with_seed_or_options_after_a_life_loss_starts_a_new_game(reset_kwargs):
    counter = CountResets(breakout())
    env = EpisodicLife(counter)
    env.reset(seed=0)
    for (_, _, terminated, _, info), lives in play(env):  # noqa: B007 (the last step is checked below)
        pass
    assert terminated and info["life_loss"] and lives == 4
    _, info = env.reset(**reset_kwargs)
    assert counter.resets == 2 and info["lives"] == 5 and info["episode_frame_number"] == 0


def test_episodic_life_reset_in_the_middle_of_a_life_starts_a_new_game():
    counter = CountResets(breakout())
    env = EpisodicLife(counter)
    env.reset(seed=0)
    for _ in range(10):
        env.step(FIRE)
    _, info = env.reset()
    assert counter.resets == 2 and info["episode_frame_number"] == 0


def test_monitor_below_episodic_life_reports_whole_game_returns_and_lengths():
    env = make_atari("ALE/Breakout-v5", protocol="efficientzero")
    env.reset(seed=0)
    game_return, game_length, life_episodes = 0.0, 0, 0
    rng = np.random.default_rng(0)
    while True:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        game_return += float(reward)
        game_length += 1
        if terminated or truncated:
            life_episodes += 1
            if "episode" in info:
                break
            assert info["life_loss"]
            env.reset()
    assert life_episodes == 5  # the Monitor saw one game where the agent saw five episodes
    assert info["episode"]["r"] == pytest.approx(game_return)
    assert info["episode"]["l"] == game_length
    assert game_return > 0  # a game with points, so a per-life split would have shown up


def test_sb3_adds_no_monitor_of_its_own_above_the_factory_stack():
    env = make_atari("ALE/Breakout-v5", protocol="efficientzero")
    vec_env = BaseAlgorithm._wrap_env(env, verbose=0, monitor_wrapper=True)
    assert vec_env.envs[0] is env


@pytest.mark.parametrize("wrapper", [LifeLossInfo, EpisodicLife])
def test_gymnasium_and_sb3_env_checkers_pass(wrapper):
    # skip_render_check: Gymnasium would re-make the env in "human" mode, which needs a display
    gym_check_env(wrapper(breakout()), skip_render_check=True)
    sb3_check_env(wrapper(breakout()))
