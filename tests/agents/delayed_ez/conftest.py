"""Tiny models and toy envs for the DelayedEZ tests."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

TINY_MLP = dict(
    latent_dim=8, hidden=(16,), head_hidden=(8,), lstm_hidden_size=8, proj_hidden=8, proj_out=8, pred_hidden=4,
    support_size=10,
)
TINY_CONV = dict(
    num_channels=4, num_blocks=1, downsample=False, reduced_channels=2, head_hidden=(8,), lstm_hidden_size=8,
    proj_hidden=8, proj_out=8, pred_hidden=4, support_size=10,
)


class ToyImageEnv(gym.Env):
    """``size`` x ``size`` RGB frames (channel-last uint8, 12 px by default); the reward is 1 when the action matches
    the frame's colour index."""

    def __init__(self, episode_length: int = 12, size: int = 12) -> None:
        self.observation_space = spaces.Box(0, 255, (size, size, 3), dtype=np.uint8)
        self.action_space = spaces.Discrete(3)
        self.episode_length = episode_length

    def _frame(self) -> np.ndarray:
        frame = np.zeros(self.observation_space.shape, dtype=np.uint8)
        frame[..., self._colour] = 200
        return frame

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._colour = int(self.np_random.integers(3))
        return self._frame(), {}

    def step(self, action: int):
        reward = float(action == self._colour)
        self._t += 1
        self._colour = int(self.np_random.integers(3))
        return self._frame(), reward, False, self._t >= self.episode_length, {}


class ToyVectorEnv(gym.Env):
    """A 4-vector, 2 actions; the reward is 1 when the action equals the sign bit of the first entry."""

    def __init__(self, episode_length: int = 15) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.episode_length = episode_length

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._t = 0
        self._obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        return self._obs, {}

    def step(self, action: int):
        reward = float(action == int(self._obs[0] > 0))
        self._t += 1
        self._obs = self.np_random.uniform(-1, 1, 4).astype(np.float32)
        terminated = self._t >= self.episode_length
        return self._obs, reward, terminated, False, {}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def tiny_mlp() -> dict:
    return dict(TINY_MLP)


@pytest.fixture
def tiny_conv() -> dict:
    return dict(TINY_CONV)


@pytest.fixture
def image_env() -> gym.Env:
    return ToyImageEnv()


@pytest.fixture
def vector_env() -> gym.Env:
    return ToyVectorEnv()


@pytest.fixture
def toy():
    """``toy("vector" | "image", **kwargs)``: a fresh toy env."""

    def make(kind: str, **kwargs: Any) -> gym.Env:
        return {"vector": ToyVectorEnv, "image": ToyImageEnv}[kind](**kwargs)

    return make
