"""DeepMind Control Suite environments through shimmy, with proprio or pixel observations.

Pixels render headless: unless ``MUJOCO_GL`` is already set, :func:`make_dmc` sets it to ``"egl"``
(on Linux) before it first imports ``dm_control``; the choice is fixed once ``dm_control`` is imported,
so set ``MUJOCO_GL`` yourself when you import it first. EGL works on GPU machines and, through Mesa's
llvmpipe, on CPU-only ones. Importing this module changes nothing in the process.

The stack :func:`make_dmc` builds, from the simulator up::

    shimmy DmControlCompatibilityV0 -> Float32Action -> ActionRepeat -> FlattenProprio | RenderedPixels
    -> EpisodeMonitor (per-episode scores) -> ExecutionDelay (delay=) -> PendingActionsObservation
"""

from __future__ import annotations

import math
import os
import sys
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.core import ActType, ObsType

from delayzoo.checks import check_int
from delayzoo.wrappers.delay import DelayProcess, ExecutionDelay
from delayzoo.wrappers.pending import PendingActionsObservation

OBSERVATIONS = ("proprio", "pixels")

CAMERAS: dict[str, int] = {"quadruped": 2}
"""Camera per domain where it is not 0 (DreamerV3's choice)."""


class ActionRepeat(gym.Wrapper[ObsType, ActType, ObsType, ActType], gym.utils.RecordConstructorArgs):
    """Repeat each action ``repeat`` times and sum the rewards; stop early when the episode ends.

    Example:
        >>> env = ActionRepeat(gym.make("Pendulum-v1"), repeat=2)
        >>> _ = env.reset(seed=0)
        >>> _, reward, _, _, _ = env.step(env.action_space.sample())

    :param env: the environment
    :param repeat: simulator steps per agent step
    """

    def __init__(self, env: gym.Env[ObsType, ActType], repeat: int = 2) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, repeat=repeat)
        gym.Wrapper.__init__(self, env)
        self.repeat = check_int(repeat, "repeat", 1)

    def step(self, action: ActType) -> tuple[ObsType, SupportsFloat, bool, bool, dict[str, Any]]:
        total_reward = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total_reward += float(reward)
            if terminated or truncated:
                break
        return obs, total_reward, terminated, truncated, info


class FlattenProprio(gym.ObservationWrapper[np.ndarray, ActType, dict], gym.utils.RecordConstructorArgs):
    """Concatenate a ``Dict`` of state arrays (a DMC proprio observation) into one ``float32`` vector.

    The entries follow the order of the ``Dict`` space; scalars count as one entry.

    Example:
        >>> register_dmc_envs()
        >>> env = FlattenProprio(gym.make("dm_control/cartpole-swingup-v0"))
        >>> env.observation_space
        Box(-inf, inf, (5,), float32)

    :param env: an environment with a ``Dict`` of ``Box`` observations
    """

    def __init__(self, env: gym.Env[dict, ActType]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        if not isinstance(space, spaces.Dict) or not all(isinstance(s, spaces.Box) for s in space.values()):
            raise TypeError(f"FlattenProprio needs a Dict of Box observations, got {space}")
        self._keys = list(space.keys())
        size = sum(math.prod(space[key].shape or ()) for key in self._keys)
        self.observation_space = spaces.Box(-np.inf, np.inf, (size,), dtype=np.float32)

    def observation(self, observation: dict) -> np.ndarray:
        return np.concatenate([np.asarray(observation[key], dtype=np.float32).reshape(-1) for key in self._keys])


class Float32Action(gym.ActionWrapper[ObsType, np.ndarray, np.ndarray], gym.utils.RecordConstructorArgs):
    """Expose a ``Box`` action space as ``float32`` (what SB3 policies produce); actions are cast back.

    Example:
        >>> env = Float32Action(gym.make("Pendulum-v1"))
        >>> env.action_space.dtype
        dtype('float32')

    :param env: an environment with a ``Box`` action space
    """

    def __init__(self, env: gym.Env[ObsType, np.ndarray]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        space = env.action_space
        if not isinstance(space, spaces.Box):
            raise TypeError(f"Float32Action needs a Box action space, got {space}")
        self.action_space = spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)

    def action(self, action: np.ndarray) -> np.ndarray:
        return np.asarray(action, dtype=self.env.action_space.dtype)


class RenderedPixels(gym.ObservationWrapper[np.ndarray, ActType, Any], gym.utils.RecordConstructorArgs):
    """Replace the observation by ``env.render()``: a ``uint8`` image of shape ``(height, width, 3)``.

    The env must have been made with ``render_mode="rgb_array"`` and render at that size.

    Example:
        >>> register_dmc_envs()  # headless rendering unless MUJOCO_GL is set
        >>> env = RenderedPixels(gym.make("dm_control/cartpole-swingup-v0", render_mode="rgb_array",
        ...     render_kwargs={"height": 64, "width": 64, "camera_id": 0}), height=64, width=64)
        >>> env.reset(seed=0)[0].shape
        (64, 64, 3)

    :param env: an environment with ``render_mode="rgb_array"``
    :param height: image height, as rendered
    :param width: image width, as rendered
    """

    def __init__(self, env: gym.Env[Any, ActType], height: int, width: int) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, height=height, width=width)
        gym.ObservationWrapper.__init__(self, env)
        if env.render_mode != "rgb_array":
            raise ValueError(f"RenderedPixels needs render_mode='rgb_array', got {env.render_mode!r}")
        self.observation_space = spaces.Box(
            0, 255, (check_int(height, "height", 1), check_int(width, "width", 1), 3), dtype=np.uint8
        )

    def observation(self, observation: Any) -> np.ndarray:
        pixels = self.env.render()
        if not isinstance(pixels, np.ndarray) or pixels.shape != self.observation_space.shape:
            raise ValueError(
                f"render() returned {type(pixels).__name__} of shape {getattr(pixels, 'shape', None)}, "
                f"expected an array of shape {self.observation_space.shape}"
            )
        return pixels


def register_dmc_envs() -> None:
    """Register shimmy's ``dm_control/`` ids, rendering headless with EGL unless ``MUJOCO_GL`` is set.

    ``MUJOCO_GL`` is read once, when ``dm_control`` is first imported: it is set here (on Linux, when
    the user has not set it and ``dm_control`` is not imported yet), and nowhere else.
    """
    if sys.platform.startswith("linux") and "MUJOCO_GL" not in os.environ and "dm_control" not in sys.modules:
        os.environ["MUJOCO_GL"] = "egl"
    import shimmy  # noqa: F401  (registers the dm_control/ ids)


def _dmc_id(task: str) -> str:
    env_id = task if task.startswith("dm_control/") else f"dm_control/{task}-v0"
    if env_id not in gym.registry:
        raise ValueError(
            f"unknown DeepMind Control task {task!r}; expected 'domain-task' such as 'cartpole-swingup'"
        )
    return env_id


def make_dmc(
    task: str = "cartpole-swingup",
    *,
    obs: str = "proprio",
    action_repeat: int = 2,
    size: int = 64,
    camera_id: int | None = None,
    delay: int | DelayProcess | None = None,
    init_action: Any = "noop",
    pending_view: bool = False,
    monitor: bool | str | dict[str, Any] = True,
    render_mode: str | None = None,
) -> gym.Env:
    """Make a DeepMind Control task: ``make_dmc("walker-walk", obs="pixels")``.

    ``obs="proprio"`` gives the task's state vector, flattened into a ``float32`` ``Box``;
    ``obs="pixels"`` gives ``uint8`` images of shape ``(size, size, 3)`` rendered headless. Episodes
    last 1000 simulator steps (``1000 / action_repeat`` agent steps) and end by truncation.
    See the module docstring for the order of the wrappers.

    Example:
        >>> env = make_dmc("cartpole-swingup", obs="pixels", action_repeat=2, size=64)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape, obs.dtype
        ((64, 64, 3), dtype('uint8'))

    :param task: ``"domain-task"`` as in the suite (``"cartpole-swingup"``, ``"ball_in_cup-catch"``)
        or a full shimmy id (``"dm_control/cartpole-swingup-v0"``)
    :param obs: ``"proprio"`` or ``"pixels"``
    :param action_repeat: simulator steps per agent step; rewards are summed
    :param size: image side for ``obs="pixels"``
    :param camera_id: camera for ``obs="pixels"``; default 2 for quadruped, else 0
    :param delay: if given, wrap in :class:`~delayzoo.wrappers.delay.ExecutionDelay` with this delay
    :param init_action: filler actions of the delay queue (see ``ExecutionDelay``)
    :param pending_view: add :class:`~delayzoo.wrappers.pending.PendingActionsObservation` (needs ``delay``)
    :param monitor: put an :class:`~delayzoo.wrappers.monitor.EpisodeMonitor` below the delay wrappers;
        a string is its CSV file name, a dict its keywords (``filename``, ``info_keywords``, ...)
    :param render_mode: ``render()`` of the task (``"rgb_array"``: ``size`` x ``size`` images from
        ``camera_id``); pixel observations always render ``"rgb_array"``
    :return: the wrapped environment
    """
    register_dmc_envs()

    if obs not in OBSERVATIONS:
        raise ValueError(f"unknown obs {obs!r}; expected one of {list(OBSERVATIONS)}")
    action_repeat = check_int(action_repeat, "action_repeat", 1)
    size = check_int(size, "size", 1)
    env_id = _dmc_id(task)
    if camera_id is None:
        camera_id = CAMERAS.get(env_id.removeprefix("dm_control/").split("-")[0], 0)
    camera_id = check_int(camera_id, "camera_id", 0)
    if pending_view and delay is None:
        raise ValueError("pending_view=True shows the pending actions of an execution delay; pass delay= as well")

    if obs == "pixels" and render_mode not in (None, "rgb_array"):
        raise ValueError(f"obs='pixels' renders with render_mode='rgb_array', got render_mode={render_mode!r}")
    render_kwargs = {"height": size, "width": size, "camera_id": camera_id}
    if obs == "pixels" or render_mode is not None:
        env = gym.make(env_id, render_mode=render_mode or "rgb_array", render_kwargs=render_kwargs)
    else:
        env = gym.make(env_id)
    env = ActionRepeat(Float32Action(env), action_repeat)
    env = RenderedPixels(env, size, size) if obs == "pixels" else FlattenProprio(env)
    if monitor is not False:
        from delayzoo.wrappers.monitor import add_episode_monitor  # imports SB3: only when used

        env = add_episode_monitor(env, monitor)
    if delay is not None:
        env = ExecutionDelay(env, delay, init_action=init_action)
    if pending_view:
        env = PendingActionsObservation(env)
    return env
