"""A Gymnasium env package for the ``--gym-packages`` tests: importing it registers ``DelayzooSuccess-v0``.

A subprocess that has not imported this module does not know the id: only the parent's ``EnvSpec``
(whose entry point imports the class) can make the env there.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class SuccessEnv(CartPoleEnv):
    """CartPole that reports ``info["is_success"]`` (the pole still up), like goal-conditioned envs."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "is_success": not terminated}


gym.register("DelayzooSuccess-v0", entry_point=f"{__name__}:SuccessEnv", max_episode_steps=20)
