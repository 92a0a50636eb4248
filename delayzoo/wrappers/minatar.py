"""MinAtar games (``MinAtar/Breakout-v1``, ...): 10x10 pixel Atari miniatures that a CPU can learn.

MinAtar is an optional dependency under the GPL (``pip install "delayzoo[minatar]"``). Its package
declares its ids through a plugin entry point that Gymnasium 1.x no longer loads, so
:func:`register_minatar_envs` registers them (the zoo calls it in every process that makes envs).

Its observations are ``(10, 10, C)`` booleans, one channel per object kind. Agents take them as
float32 channels-first images ``(C, 10, 10)`` (:class:`MinAtarObservation`): SB3's ``VecFrameStack``,
the pending view and the replays then see an ordinary float ``Box``. They are too small for SB3's
NatureCNN (at least 36 pixels): use :class:`~delayzoo.agents.common.extractors.SmallCNN`, a flat MLP,
or DelayedEZ's conv net without its /16 stem.

The stack :func:`make_minatar` builds, from the game up::

    minatar.gym.BaseEnv -> TimeLimit (max_episode_steps) -> EpisodeMonitor (per-episode scores)
    -> MinAtarObservation -> ExecutionDelay (delay=) -> PendingActionsObservation
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from delayzoo.checks import check_int
from delayzoo.wrappers.delay import DelayProcess, ExecutionDelay
from delayzoo.wrappers.pending import PendingActionsObservation

__all__ = ["INSTALL_MINATAR", "MinAtarObservation", "is_minatar_id", "make_minatar", "register_minatar_envs"]

INSTALL_MINATAR = 'pip install "delayzoo[minatar]"'
"""How to install the optional MinAtar games."""

PREFIX = "MinAtar/"


def is_minatar_id(env_id: str) -> bool:
    """Whether ``env_id`` names a MinAtar game (``MinAtar/<Game>-v0`` or ``-v1``)."""
    return env_id.startswith(PREFIX)


def register_minatar_envs() -> None:
    """Register MinAtar's ``MinAtar/<Game>-v0/-v1`` ids in Gymnasium's registry (once per process).

    :raise ImportError: naming the extra to install when MinAtar is not installed
    """
    if f"{PREFIX}Breakout-v1" in gym.registry:
        return
    try:
        import minatar.gym
    except ImportError as error:
        raise ImportError(f"MinAtar games need the minatar package: {INSTALL_MINATAR} ({error})") from error
    minatar.gym.register_envs()


class MinAtarObservation(gym.ObservationWrapper[np.ndarray, Any, np.ndarray], gym.utils.RecordConstructorArgs):
    """MinAtar's ``(H, W, C)`` boolean frames as float32 channels-first ``(C, H, W)`` in ``{0, 1}``.

    Example:
        >>> register_minatar_envs()
        >>> env = MinAtarObservation(gym.make("MinAtar/Breakout-v1"))
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((4, 10, 10), dtype('float32'))

    :param env: a MinAtar env (any env with ``(H, W, C)`` Box observations)
    """

    def __init__(self, env: gym.Env[np.ndarray, Any]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, spaces.Box) or len(space.shape) != 3:
            raise ValueError(f"MinAtarObservation needs (H, W, C) Box observations, got {space}")
        height, width, channels = space.shape
        self.observation_space = spaces.Box(0.0, 1.0, (channels, height, width), np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(np.moveaxis(observation, -1, 0), dtype=np.float32)


def make_minatar(
    env_id: str,
    *,
    max_episode_steps: int | None = 10_000,
    delay: int | DelayProcess | None = None,
    init_action: Any = "noop",
    pending_view: bool = False,
    monitor: bool | str | dict[str, Any] = True,
    **game_kwargs: Any,
) -> gym.Env:
    """Make a MinAtar game with float channels-first frames: ``make_minatar("MinAtar/Breakout-v1")``.

    The game keeps MinAtar's defaults (sticky actions with probability 0.1, difficulty ramping);
    ``game_kwargs`` (``sticky_action_prob``, ``difficulty_ramping``, ``render_mode``) go to ``gym.make``.
    MinAtar games have no time limit of their own: ``max_episode_steps`` truncates an episode so that
    evaluating a good agent ends (``None``: no limit).

    Example:
        >>> from delayzoo.wrappers import RandomWalkDelay
        >>> env = make_minatar("MinAtar/Breakout-v1", delay=RandomWalkDelay(max_delay=5), pending_view=True)
        >>> obs, info = env.reset(seed=0)
        >>> obs["observation"].shape, info["delay"]
        ((4, 10, 10), 5)

    :param env_id: a MinAtar id such as ``"MinAtar/Breakout-v1"`` (``-v1``: the game's minimal action set)
    :param max_episode_steps: steps after which an episode is truncated, or ``None``
    :param delay: an execution delay (steps, or a delay process) put over the game, or ``None``
    :param init_action: the delay queue's filler at reset (see :class:`~delayzoo.wrappers.ExecutionDelay`)
    :param pending_view: add :class:`~delayzoo.wrappers.PendingActionsObservation` (needs ``delay``)
    :param monitor: an :class:`~delayzoo.wrappers.monitor.EpisodeMonitor` below the delay: ``True``, a
        CSV file name, its keywords, or ``False`` for none
    :raise ValueError: for an id that is not a MinAtar game, or ``pending_view`` without ``delay``
    :raise ImportError: naming the extra when MinAtar is not installed
    """
    if not is_minatar_id(env_id):
        raise ValueError(f"make_minatar needs a MinAtar id such as 'MinAtar/Breakout-v1', got {env_id!r}")
    if pending_view and delay is None:
        raise ValueError("pending_view=True needs a delay (the pending actions come from ExecutionDelay)")
    register_minatar_envs()
    if env_id not in gym.registry:
        games = sorted(name for name in gym.registry if is_minatar_id(name))
        raise ValueError(f"unknown MinAtar game {env_id!r}; expected one of {games}")
    env: gym.Env = gym.make(env_id, **game_kwargs)
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, check_int(max_episode_steps, "max_episode_steps", 1))
    if monitor is not False:
        from delayzoo.wrappers.monitor import add_episode_monitor  # imports SB3: only when used

        env = add_episode_monitor(env, monitor)
    env = MinAtarObservation(env)
    if delay is not None:
        env = ExecutionDelay(env, delay, init_action=init_action)
        if pending_view:
            env = PendingActionsObservation(env)
    return env
