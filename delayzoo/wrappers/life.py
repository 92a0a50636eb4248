"""Life-loss handling for games with several lives (DESIGN.md §4).

Both wrappers read the lives counter from ``info["lives"]``, which every ALE environment reports on
``reset`` and ``step``. Episode statistics (SB3 ``Monitor`` or Gymnasium ``RecordEpisodeStatistics``)
belong *below* these wrappers, so that reported scores are per game, never per life.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
from gymnasium.core import ActType, ObsType


def _read_lives(info: dict[str, Any]) -> int:
    """Return the lives counter of an ``info`` dict, or fail with a message that says what is missing."""
    if "lives" not in info:
        raise ValueError(
            f"life-loss wrappers need info['lives'] from the wrapped env (an ALE game); got info keys {sorted(info)}"
        )
    return int(info["lives"])


class LifeLossInfo(gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs):
    """Add ``info["life_loss"]``: True on the step where the lives counter dropped, False otherwise.

    The counter is followed both ways: when a game awards a life, the new, higher count becomes the
    reference, so the next drop is flagged again. ``reset`` always reports ``life_loss=False``.
    Nothing else changes: the episode still ends only when the game does.

    Example:
        >>> import ale_py, gymnasium as gym
        >>> gym.register_envs(ale_py)
        >>> env = LifeLossInfo(gym.make("ALE/Breakout-v5"))
        >>> _, info = env.reset(seed=0)
        >>> info["life_loss"]
        False

    :param env: an environment whose ``info`` carries ``"lives"``
    """

    def __init__(self, env: gym.Env[ObsType, ActType]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self._lives = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        info = dict(info)
        self._lives = _read_lives(info)
        info["life_loss"] = False
        return obs, info

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        lives = _read_lives(info)
        info["life_loss"] = lives < self._lives
        self._lives = lives
        return obs, reward, terminated, truncated, info


class EpisodicLife(LifeLossInfo[ObsType, ActType]):
    """End the episode on every lost life while the game goes on (for model-free SB3 agents).

    A step that loses a life returns ``terminated=True`` (and ``info["life_loss"]=True``, as
    :class:`LifeLossInfo` does). The next ``reset()`` does not restart the game: it calls neither
    ``env.reset()`` nor ``env.step()``, and returns the observation and ``info`` of that step, from
    which the game continues. Every other ``reset()`` starts a new game: after game over
    (the wrapped env terminated or truncated), before any step, mid-life, and whenever a ``seed`` or
    ``options`` is given.

    Example:
        >>> import ale_py, gymnasium as gym
        >>> gym.register_envs(ale_py)
        >>> env = EpisodicLife(gym.make("ALE/Breakout-v5"))
        >>> obs, info = env.reset(seed=0)
        >>> terminated = truncated = False
        >>> while not (terminated or truncated):
        ...     obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        >>> info["lives"] == 4 and info["life_loss"]
        True
        >>> obs, info = env.reset()  # same game, one life fewer
        >>> info["lives"]
        4

    :param env: an environment whose ``info`` carries ``"lives"``
    """

    def __init__(self, env: gym.Env[ObsType, ActType]) -> None:
        super().__init__(env)
        self._continuation: tuple[ObsType, dict[str, Any]] | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[ObsType, dict[str, Any]]:
        continuation, self._continuation = self._continuation, None
        if continuation is None or seed is not None or options is not None:
            return super().reset(seed=seed, options=options)
        obs, info = continuation
        return obs, {**info, "life_loss": False}

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        game_over = terminated or truncated
        self._continuation = (obs, info) if info["life_loss"] and not game_over else None
        return obs, reward, terminated or info["life_loss"], truncated, info
