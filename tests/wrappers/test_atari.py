"""make_atari: protocol defaults and options, frame max-pooling, delays, env checkers, SB3 agents."""

from __future__ import annotations

import warnings

import ale_py
import cv2
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from gymnasium.utils.env_checker import check_env as gym_check_env
from sb3_contrib import QRDQN
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from delayzoo.wrappers.atari import FrameStack, MaxPoolFrameSkip, NoopReset, make_atari
from delayzoo.wrappers.delay import ExecutionDelay, RandomWalkDelay
from delayzoo.wrappers.life import EpisodicLife, LifeLossInfo
from delayzoo.wrappers.pending import find_execution_delay

gym.register_envs(ale_py)

NOOP, FIRE, RIGHT, LEFT = 0, 1, 2, 3


@pytest.fixture
def one_torch_thread():
    """Small convolutions run ~50x slower on two threads of a shared two-core machine than on one."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def wrappers_of(env: gym.Env) -> list[type]:
    types = []
    while isinstance(env, gym.Wrapper):
        types.append(type(env))
        env = env.env
    return types


class ScriptedFrames(gym.Env):
    """Step ``t`` returns frame ``frames[t - 1]`` and reward ``t``; terminates at step ``end``."""

    observation_space = spaces.Box(0, 255, (2, 2, 3), np.uint8)
    action_space = spaces.Discrete(2)

    def __init__(self, frames: np.ndarray, end: int) -> None:
        self.frames, self.end, self.t = frames, end, 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros((2, 2, 3), np.uint8), {}

    def step(self, action):
        self.t += 1
        return self.frames[self.t - 1], float(self.t), self.t == self.end, False, {}


def test_pamorl_protocol_is_the_default():
    env = make_atari("ALE/Breakout-v5")
    ale = env.unwrapped.ale
    assert env.observation_space == spaces.Box(0, 255, (64, 64, 3), np.uint8)
    assert env.action_space == spaces.Discrete(4)
    assert ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert ale.getInt("max_num_frames_per_episode") == 108_000
    assert LifeLossInfo in wrappers_of(env) and EpisodicLife not in wrappers_of(env)
    assert NoopReset not in wrappers_of(env)
    obs, info = env.reset(seed=0)
    assert obs.shape == (64, 64, 3) and obs.dtype == np.uint8
    assert info["episode_frame_number"] == 0 and info["life_loss"] is False
    _, _, _, _, info = env.step(FIRE)
    assert info["episode_frame_number"] == 4  # our own frame skip over an ALE made with frameskip=1


def test_efficientzero_protocol_has_no_sticky_actions_96px_noop_starts_and_episodic_life():
    env = make_atari("ALE/Breakout-v5", protocol="efficientzero")
    assert env.observation_space.shape == (96, 96, 3)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    assert EpisodicLife in wrappers_of(env)
    starts = [env.reset(seed=seed)[1]["episode_frame_number"] for seed in range(6)]
    starts += [env.reset()[1]["episode_frame_number"] for _ in range(6)]
    assert all(1 <= start <= 30 for start in starts)
    assert len(set(starts)) > 3
    assert starts[:3] == [env.reset(seed=seed)[1]["episode_frame_number"] for seed in range(3)]


def test_explicit_keywords_override_the_protocol():
    env = make_atari(
        "ALE/Breakout-v5",
        protocol="efficientzero",
        size=84,
        repeat_action_probability=0.1,
        noop_max=0,
        episodic_life=False,
        full_action_space=True,
    )
    assert env.observation_space.shape == (84, 84, 3)
    assert env.action_space == spaces.Discrete(18)
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.1)
    assert LifeLossInfo in wrappers_of(env) and EpisodicLife not in wrappers_of(env)
    assert env.reset(seed=0)[1]["episode_frame_number"] == 0


def test_observation_is_the_resized_max_of_the_last_two_of_four_frames():
    env = make_atari("ALE/Breakout-v5")
    reference = gym.make("ALE/Breakout-v5", frameskip=1)  # same sticky actions, same seed: same game
    env.reset(seed=3)
    reference.reset(seed=3)
    rng = np.random.default_rng(0)
    pooling_mattered = 0
    for _ in range(60):
        action = int(rng.choice([FIRE, RIGHT, LEFT]))
        obs, reward, terminated, truncated, _ = env.step(action)
        frames, rewards = [], []
        for _ in range(4):
            frame, raw_reward, *_ = reference.step(action)
            frames.append(frame)
            rewards.append(raw_reward)
        pooled = np.maximum(frames[-2], frames[-1])
        np.testing.assert_array_equal(obs, cv2.resize(pooled, (64, 64), interpolation=cv2.INTER_AREA))
        assert reward == sum(rewards)
        pooling_mattered += not np.array_equal(pooled, frames[-1])
        assert not (terminated or truncated)
    assert pooling_mattered > 10


@pytest.mark.parametrize(
    ("skip", "end", "steps", "pooled", "reward"),
    [(4, 99, 4, (2, 3), 10.0), (4, 2, 2, (0, 1), 3.0), (4, 1, 1, (0,), 1.0), (1, 99, 1, (0,), 1.0)],
)
def test_frame_skip_stops_at_game_end_and_pools_the_last_two_frames_seen(skip, end, steps, pooled, reward):
    frames = np.random.default_rng(0).integers(0, 256, (4, 2, 2, 3), dtype=np.uint8)
    base = ScriptedFrames(frames, end)
    env = MaxPoolFrameSkip(base, skip)
    env.reset()
    obs, total, *_ = env.step(0)
    assert base.t == steps
    np.testing.assert_array_equal(obs, np.max(frames[list(pooled)], axis=0))
    assert total == reward


def test_game_is_truncated_after_max_frames():
    env = make_atari("ALE/Breakout-v5", max_frames=400)
    env.reset(seed=0)
    for step in range(1, 101):  # noqa: B007 (checked after the loop)
        _, _, terminated, truncated, info = env.step(NOOP)  # the ball is never served: no life is lost
        assert not terminated
        if truncated:
            break
    assert step == 100 and truncated
    assert info["episode"]["l"] == 100


def test_delay_option_delays_execution_below_the_life_loss_wrapper():
    env = make_atari("ALE/Breakout-v5", delay=2)
    delay_wrapper = find_execution_delay(env)
    assert isinstance(delay_wrapper, ExecutionDelay) and delay_wrapper.max_delay == 2
    assert wrappers_of(env).index(LifeLossInfo) < wrappers_of(env).index(ExecutionDelay)
    _, info = env.reset(seed=0)
    assert info["delay"] == 2 and "lives" in info
    executed = [env.step(action)[4]["executed_action"] for action in [FIRE, RIGHT, LEFT, RIGHT]]
    assert executed == [NOOP, NOOP, FIRE, RIGHT]


def test_pending_view_gives_a_dict_observation():
    env = make_atari("ALE/Breakout-v5", delay=RandomWalkDelay(max_delay=3), pending_view=True)
    assert isinstance(env.observation_space, spaces.Dict)
    assert env.observation_space["observation"].shape == (64, 64, 3)
    assert env.observation_space["pending_actions"] == spaces.MultiDiscrete([4, 4, 4])
    obs, _ = env.reset(seed=0)
    assert obs["delay"] == 3 and env.observation_space.contains(obs)


def test_episodic_life_continuation_keeps_the_pending_queue():
    env = make_atari("ALE/Breakout-v5", protocol="efficientzero", delay=3, pending_view=True)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    while True:
        obs, _, terminated, _, info = env.step(int(rng.integers(1, 4)))
        if terminated:
            break
    assert info["life_loss"] and info["lives"] == 4
    assert obs["pending_actions"].any()  # the agent's own actions are in flight, not the noop fillers
    next_obs, next_info = env.reset()
    assert next_info["lives"] == 4
    np.testing.assert_array_equal(next_obs["pending_actions"], obs["pending_actions"])
    np.testing.assert_array_equal(next_obs["observation"], obs["observation"])


def test_frame_stack_is_channels_first_below_the_pending_view_newest_frame_last():
    frames = np.arange(1, 7, dtype=np.uint8)[:, None, None, None] * np.ones((1, 2, 2, 3), np.uint8)
    env = FrameStack(ScriptedFrames(frames, end=6), 3)
    assert env.observation_space.shape == (9, 2, 2)
    obs, _ = env.reset()
    assert obs.shape == (9, 2, 2) and not obs.any()  # three copies of the (zero) first frame
    for _ in range(1, 4):
        obs = env.step(0)[0]
    assert [int(obs[3 * i, 0, 0]) for i in range(3)] == [1, 2, 3]

    atari = make_atari("ALE/Breakout-v5", delay=RandomWalkDelay(max_delay=3), frame_stack=4, pending_view=True)
    assert wrappers_of(atari)[:2] == [type(atari), FrameStack]
    assert atari.observation_space["observation"].shape == (12, 64, 64)
    first, _ = atari.reset(seed=0)
    second = atari.step(1)[0]
    np.testing.assert_array_equal(second["observation"][:9], first["observation"][3:])


def test_a_new_life_starts_a_fresh_stack():
    env = make_atari("ALE/Breakout-v5", protocol="efficientzero", frame_stack=2)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    while not env.step(int(rng.integers(1, 4)))[2]:
        pass
    obs, info = env.reset()
    assert info["lives"] == 4
    np.testing.assert_array_equal(obs[:3], obs[3:])


@pytest.mark.parametrize(
    "options",
    [{}, {"protocol": "efficientzero"}, {"delay": RandomWalkDelay(max_delay=3), "pending_view": True},
     {"frame_stack": 4, "delay": 2, "pending_view": True}],
    ids=["pamorl", "efficientzero", "pamorl-delay-pending", "stacked-delay-pending"],
)
def test_gymnasium_and_sb3_env_checkers_pass(options):
    # skip_render_check: Gymnasium would re-make the env in "human" mode, which needs a display
    gym_check_env(make_atari("ALE/Breakout-v5", **options), skip_render_check=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sb3_check_env(make_atari("ALE/Breakout-v5", **options))


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"protocol": "dreamer"}, ValueError, "dreamer"),
        ({"size": 0}, ValueError, "size"),
        ({"size": 64.0}, TypeError, "size"),
        ({"frame_skip": 0}, ValueError, "frame_skip"),
        ({"noop_max": -1}, ValueError, "noop_max"),
        ({"max_frames": 0}, ValueError, "max_frames"),
        ({"repeat_action_probability": 1.5}, ValueError, "1.5"),
        ({"pending_view": True}, ValueError, "pending_view"),
        ({"delay": -1}, ValueError, "-1"),
        ({"frame_stack": 0}, ValueError, "frame_stack"),
        ({"frame_stack": 2.5}, TypeError, "frame_stack"),
    ],
)
def test_bad_options_raise_naming_the_value(options, error, match):
    with pytest.raises(error, match=match):
        make_atari("ALE/Breakout-v5", **options)


@pytest.mark.parametrize(("env_id", "match"), [("CartPole-v1", "CartPole-v1"), ("ALE/NoSuchGame-v5", "NoSuchGame")])
def test_non_atari_ids_raise_naming_the_id(env_id, match):
    with pytest.raises(ValueError, match=match):
        make_atari(env_id)


def test_dqn_cnn_policy_runs_a_few_hundred_steps(one_torch_thread):
    env = make_atari("ALE/Breakout-v5")
    model = DQN("CnnPolicy", env, buffer_size=1_000, learning_starts=100, batch_size=16, train_freq=4, seed=0)
    model.learn(300)
    assert model.num_timesteps == 300
    assert model.replay_buffer.size() == 300
    assert model.replay_buffer.observations.shape[-3:] == (3, 64, 64)  # SB3 stores images channel-first
    assert model._n_updates > 0


class CountLifeEpisodes(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.life_losses = 0
        self.games = 0

    def _on_step(self) -> bool:
        for done, info in zip(self.locals["dones"], self.locals["infos"]):
            self.life_losses += bool(done and info["life_loss"])
            self.games += "episode" in info
        return True


def test_qrdqn_runs_on_a_delayed_efficientzero_env_with_the_pending_view(one_torch_thread):
    env = make_atari(
        "ALE/Breakout-v5", protocol="efficientzero", delay=RandomWalkDelay(max_delay=3), pending_view=True
    )
    model = QRDQN("MultiInputPolicy", env, buffer_size=500, learning_starts=64, batch_size=16, train_freq=4, seed=0)
    counter = CountLifeEpisodes()
    model.learn(200, callback=counter)
    assert model.num_timesteps == 200
    assert model.replay_buffer.observations["pending_actions"].shape[-1] == 3
    assert model._n_updates > 0
    assert counter.life_losses >= 2  # SB3 reset the env after each lost life: EpisodicLife continued the game
    assert len(model.ep_info_buffer) == counter.games  # and its episode statistics count whole games only
