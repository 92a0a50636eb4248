"""Atari 100k environments: the PaMoRL protocol by default, the EfficientZero protocol on request.

The stack :func:`make_atari` builds, from the emulator up::

    ALE (frameskip=1, sticky actions, 108k-frame limit)
    -> NoopReset (EfficientZero only)   -> MaxPoolFrameSkip (4)   -> ResizeObservation (cv2, INTER_AREA)
    -> EpisodeMonitor (per-game scores) -> ExecutionDelay (delay=) -> LifeLossInfo | EpisodicLife
    -> FrameStack (frame_stack=, channels-first) -> PendingActionsObservation (pending_view=True)

The :class:`~delayzoo.wrappers.monitor.EpisodeMonitor` (an SB3 ``Monitor``) sits below the life-loss
and delay wrappers, so ``info["episode"]`` and SB3's logs report whole games (``"r"``: unclipped game
score, ``"l"``: agent steps), and SB3 does not add a ``Monitor`` of its own on top. The delay sits
below the life-loss wrappers because a lost life does not stop the actions already sent: after an
:class:`~delayzoo.wrappers.life.EpisodicLife` continuation the pending queue carries on. Frames are
stacked *below* the pending view, so any algorithm sees ``{"observation": stack, "pending_actions",
"delay"}`` (SB3's ``VecFrameStack`` cannot stack a ``Dict`` with discrete keys), and above the life-loss
wrappers, so a new life starts a fresh stack as in EfficientZero.
"""

from __future__ import annotations

import numbers
from typing import Any, SupportsFloat

import ale_py
import gymnasium as gym
import numpy as np
from gymnasium.core import ActType
from gymnasium.envs.registration import load_env_creator
from gymnasium.wrappers import ResizeObservation

from delayzoo.checks import check_int
from delayzoo.wrappers.delay import DelayProcess, ExecutionDelay
from delayzoo.wrappers.life import EpisodicLife, LifeLossInfo
from delayzoo.wrappers.pending import PendingActionsObservation

gym.register_envs(ale_py)

PROTOCOLS: dict[str, dict[str, Any]] = {
    "pamorl": {"size": 64, "repeat_action_probability": 0.25, "noop_max": 0, "episodic_life": False},
    "efficientzero": {"size": 96, "repeat_action_probability": 0.0, "noop_max": 30, "episodic_life": True},
}
"""Settings that differ between the supported protocols; everything else is shared."""


class MaxPoolFrameSkip(gym.Wrapper[np.ndarray, ActType, np.ndarray, ActType], gym.utils.RecordConstructorArgs):
    """Repeat each action for ``skip`` frames, sum the rewards and return the pixel-wise maximum of the
    last two frames (which removes Atari sprite flicker).

    When the game ends inside the skip, stepping stops there and the last two frames produced are pooled.
    Use it on an ALE env made with ``frameskip=1``.

    Example:
        >>> import ale_py, gymnasium as gym
        >>> gym.register_envs(ale_py)
        >>> env = MaxPoolFrameSkip(gym.make("ALE/Pong-v5", frameskip=1), skip=4)
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape
        (210, 160, 3)

    :param env: an environment with image observations
    :param skip: frames per agent step
    """

    def __init__(self, env: gym.Env[np.ndarray, ActType], skip: int = 4) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, skip=skip)
        gym.Wrapper.__init__(self, env)
        self.skip = check_int(skip, "skip", 1)

    def step(self, action: ActType) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        total_reward = 0.0
        last = before_last = None
        for _ in range(self.skip):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total_reward += float(reward)
            before_last, last = last, obs
            if terminated or truncated:
                break
        assert last is not None  # skip >= 1
        pooled = last if before_last is None else np.maximum(before_last, last)
        return pooled, total_reward, terminated, truncated, info


class NoopReset(gym.Wrapper[np.ndarray, int, np.ndarray, int], gym.utils.RecordConstructorArgs):
    """Start every game with a random number (1 to ``noop_max``) of no-op steps.

    The number is drawn from the env's seeded generator, so ``reset(seed=...)`` stays reproducible.
    If the game ends during the no-ops (it never does in practice), it is reset and the no-ops stop.

    Example:
        >>> import ale_py, gymnasium as gym
        >>> gym.register_envs(ale_py)
        >>> env = NoopReset(gym.make("ALE/Pong-v5", frameskip=1), noop_max=30)
        >>> obs, info = env.reset(seed=0)
        >>> 1 <= info["episode_frame_number"] <= 30
        True

    :param env: an ALE environment, whose action 0 is NOOP
    :param noop_max: the largest number of no-op steps
    """

    def __init__(self, env: gym.Env[np.ndarray, int], noop_max: int = 30) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, noop_max=noop_max)
        gym.Wrapper.__init__(self, env)
        self.noop_max = check_int(noop_max, "noop_max", 1)
        meanings: list[str] = getattr(env.unwrapped, "get_action_meanings", list)()
        if not meanings or meanings[0] != "NOOP":
            raise ValueError(f"NoopReset needs action 0 to be NOOP, got action meanings {meanings}")

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        for _ in range(int(self.np_random.integers(1, self.noop_max + 1))):
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                return self.env.reset()
        return obs, info


class FrameStack(gym.ObservationWrapper[np.ndarray, ActType, np.ndarray], gym.utils.RecordConstructorArgs):
    """Stack the last ``num_frames`` image frames channels-first: ``(H, W, C)`` -> ``(num_frames * C, H, W)``.

    Channels ``[i * C, (i + 1) * C)`` hold frame ``t - num_frames + 1 + i`` (the newest frame last). After
    ``reset`` the stack holds ``num_frames`` copies of the first frame (EfficientZero's padding), so
    consecutive observations of an episode always share ``num_frames - 1`` frames.

    Example:
        >>> import ale_py, gymnasium as gym
        >>> gym.register_envs(ale_py)
        >>> env = FrameStack(gym.make("ALE/Pong-v5"), 4)
        >>> env.reset(seed=0)[0].shape
        (12, 210, 160)

    :param env: an environment with ``(H, W, C)`` image observations
    :param num_frames: frames per observation (>= 1)
    """

    def __init__(self, env: gym.Env[np.ndarray, ActType], num_frames: int) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, num_frames=num_frames)
        gym.ObservationWrapper.__init__(self, env)
        self.num_frames = check_int(num_frames, "frame_stack", 1)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 3:
            raise ValueError(f"FrameStack needs (H, W, C) image observations, got {space}")
        height, width, channels = space.shape
        low = np.tile(np.moveaxis(space.low, -1, 0), (self.num_frames, 1, 1))
        high = np.tile(np.moveaxis(space.high, -1, 0), (self.num_frames, 1, 1))
        self.observation_space = gym.spaces.Box(low, high, (self.num_frames * channels, height, width), space.dtype)
        self._channels = channels
        self._stack = np.zeros(self.observation_space.shape, dtype=space.dtype)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        obs, info = self.env.reset(seed=seed, options=options)
        self._stack[:] = np.tile(np.moveaxis(obs, -1, 0), (self.num_frames, 1, 1))
        return self._stack.copy(), info

    def observation(self, observation: np.ndarray) -> np.ndarray:
        self._stack[: -self._channels] = self._stack[self._channels :]
        self._stack[-self._channels :] = np.moveaxis(observation, -1, 0)
        return self._stack.copy()


def make_atari(
    env_id: str,
    *,
    protocol: str = "pamorl",
    size: int | None = None,
    frame_skip: int = 4,
    repeat_action_probability: float | None = None,
    noop_max: int | None = None,
    episodic_life: bool | None = None,
    max_frames: int = 108_000,
    full_action_space: bool = False,
    delay: int | DelayProcess | None = None,
    init_action: Any = "noop",
    frame_stack: int | None = None,
    pending_view: bool = False,
    monitor: bool | str | dict[str, Any] = True,
    render_mode: str | None = None,
) -> gym.Env:
    """Make an Atari env for the 100k benchmark: ``make_atari("ALE/Pong-v5")``.

    ``protocol="pamorl"`` (default, PaMoRL/STORM): 64x64 RGB, sticky actions 0.25, no no-op starts,
    :class:`~delayzoo.wrappers.life.LifeLossInfo`. ``protocol="efficientzero"``: 96x96 RGB, no sticky
    actions, up to 30 no-ops at the start of a game, :class:`~delayzoo.wrappers.life.EpisodicLife`.
    Both: frame skip 4 with a max over the last two frames, a full game of at most 108k frames
    (27k agent steps), unclipped rewards. Keywords left at ``None`` take the protocol's value; any
    keyword given overrides it. See the module docstring for the order of the wrappers.

    Example:
        >>> from delayzoo.wrappers import RandomWalkDelay
        >>> env = make_atari("ALE/Breakout-v5", delay=RandomWalkDelay(max_delay=3), pending_view=True)
        >>> obs, info = env.reset(seed=0)
        >>> obs["observation"].shape, info["delay"], info["life_loss"]
        ((64, 64, 3), 3, False)

    :param env_id: an ALE id such as ``"ALE/Breakout-v5"``
    :param protocol: ``"pamorl"`` or ``"efficientzero"``
    :param size: side of the square RGB observation
    :param frame_skip: emulator frames per agent step
    :param repeat_action_probability: sticky-action probability in [0, 1]
    :param noop_max: most no-op frames at the start of a game (0: none)
    :param episodic_life: :class:`~delayzoo.wrappers.life.EpisodicLife` instead of
        :class:`~delayzoo.wrappers.life.LifeLossInfo` (both add ``info["life_loss"]``)
    :param max_frames: emulator frames after which a game is truncated
    :param full_action_space: all 18 actions instead of the game's minimal set
    :param delay: if given, wrap in :class:`~delayzoo.wrappers.delay.ExecutionDelay` with this delay
    :param init_action: filler actions of the delay queue (see ``ExecutionDelay``)
    :param frame_stack: stack this many frames channels-first (:class:`FrameStack`: ``(frame_stack * 3, size,
        size)``), below the pending view; ``None`` keeps single ``(size, size, 3)`` frames
    :param pending_view: add :class:`~delayzoo.wrappers.pending.PendingActionsObservation` (needs ``delay``)
    :param monitor: put an :class:`~delayzoo.wrappers.monitor.EpisodeMonitor` below the life-loss and
        delay wrappers; a string is its CSV file name, a dict its keywords (``filename``,
        ``info_keywords``, ...)
    :param render_mode: passed to ``gym.make``
    :return: the wrapped environment
    """
    if protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol {protocol!r}; expected one of {sorted(PROTOCOLS)}")
    defaults = PROTOCOLS[protocol]
    size = check_int(defaults["size"] if size is None else size, "size", 1)
    frame_skip = check_int(frame_skip, "frame_skip", 1)
    noop_max = check_int(defaults["noop_max"] if noop_max is None else noop_max, "noop_max", 0)
    max_frames = check_int(max_frames, "max_frames", 1)
    sticky = defaults["repeat_action_probability"] if repeat_action_probability is None else repeat_action_probability
    if isinstance(sticky, bool) or not isinstance(sticky, numbers.Real) or not 0.0 <= float(sticky) <= 1.0:
        raise ValueError(f"repeat_action_probability must be a probability in [0, 1], got {sticky!r}")
    episodic_life = defaults["episodic_life"] if episodic_life is None else episodic_life
    if frame_stack is not None:
        frame_stack = check_int(frame_stack, "frame_stack", 1)
    if pending_view and delay is None:
        raise ValueError("pending_view=True shows the pending actions of an execution delay; pass delay= as well")

    try:
        spec = gym.spec(env_id)
    except gym.error.Error as error:
        raise ValueError(f"unknown env id {env_id!r}; make_atari needs an ALE id such as 'ALE/Pong-v5'") from error
    creator = load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
    if not (isinstance(creator, type) and issubclass(creator, ale_py.AtariEnv)):
        raise ValueError(f"make_atari needs an ALE env id such as 'ALE/Pong-v5', got {env_id!r}")
    env = gym.make(
        env_id,
        frameskip=1,
        repeat_action_probability=float(sticky),
        max_num_frames_per_episode=max_frames,
        full_action_space=full_action_space,
        render_mode=render_mode,
    )
    if noop_max > 0:
        env = NoopReset(env, noop_max)
    env = MaxPoolFrameSkip(env, frame_skip)
    env = ResizeObservation(env, (size, size))
    if monitor is not False:
        from delayzoo.wrappers.monitor import add_episode_monitor  # imports SB3: only when used

        env = add_episode_monitor(env, monitor)
    if delay is not None:
        env = ExecutionDelay(env, delay, init_action=init_action)
    env = EpisodicLife(env) if episodic_life else LifeLossInfo(env)
    if frame_stack is not None:
        env = FrameStack(env, frame_stack)
    if pending_view:
        env = PendingActionsObservation(env)
    return env
