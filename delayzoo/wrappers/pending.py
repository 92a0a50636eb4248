"""The agent-side view of the delays: the actions whose effect it has not seen, as a ``Dict`` observation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from delayzoo.wrappers.delay import ExecutionDelay, ObservationDelay, find_wrapper

__all__ = ["PendingActionsObservation", "find_execution_delay", "find_observation_delay"]


def find_execution_delay(env: gym.Env) -> ExecutionDelay | None:
    """The outermost :class:`ExecutionDelay` in a stack of Gymnasium wrappers, or ``None``."""
    return find_wrapper(env, ExecutionDelay)


def find_observation_delay(env: gym.Env) -> ObservationDelay | None:
    """The outermost :class:`ObservationDelay` in a stack of Gymnasium wrappers, or ``None``."""
    return find_wrapper(env, ObservationDelay)


def _stack_names(env: gym.Env) -> str:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    names.append(str(env.unwrapped.spec.id if env.unwrapped.spec else type(env.unwrapped).__name__))
    return " -> ".join(names)


class PendingActionsObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Give the agent the actions whose effect it has not seen: the queue of the :class:`ExecutionDelay`
    below it, after the actions an :class:`ObservationDelay` below it has not shown the effect of.

    Observations become a ``Dict`` for SB3's ``MultiInputPolicy`` and for DelayedEZ:

    - ``"observation"``: the observation the env below shows (delayed only by an :class:`ObservationDelay`);
    - ``"pending_actions"``: the actions between that observation and the next decision's effect, oldest
      first: the ``obs_delay`` actions executed since the shown observation's step, then the ``delay``
      actions that will be executed before the next decision takes effect; padded to ``max_obs_delay +
      max_delay`` entries with 0 beyond them (when that is 0, one entry, always 0: SB3's policies cannot
      take empty vectors, so the space keeps a constant slot). Discrete actions are stored as their index in
      the space (``action - start``) in a ``MultiDiscrete``; ``MultiDiscrete`` and ``Box`` actions are
      flattened, oldest first, into one 1-D ``MultiDiscrete`` or ``Box`` (SB3 policies take 1-D vectors);
    - ``"delay"``: the delay of the next decision, ``Discrete(max_delay + 1)`` (always 0 without an
      :class:`ExecutionDelay`);
    - ``"obs_delay"``, only over an :class:`ObservationDelay`: the steps the shown observation is behind,
      ``Discrete(max_obs_delay + 1)``.

    >>> from delayzoo.wrappers import ExecutionDelay, ObservationDelay
    >>> env = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), delay=3))
    >>> obs, info = env.reset(seed=0)
    >>> sorted(obs), obs["pending_actions"].shape
    (['delay', 'observation', 'pending_actions'], (3,))
    >>> PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), delay=0)).observation_space["pending_actions"]
    MultiDiscrete([2])
    >>> env = PendingActionsObservation(ObservationDelay(ExecutionDelay(gym.make("CartPole-v1"), delay=3), delay=2))
    >>> obs, info = env.reset(seed=0)
    >>> sorted(obs), obs["pending_actions"].shape
    (['delay', 'obs_delay', 'observation', 'pending_actions'], (5,))
    """

    shows_pending_actions = True
    """Read by :class:`ObservationDelay`, which refuses to wrap a view (it would show what the delay hides)."""

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        self.delay_wrapper = find_execution_delay(env)
        self.observation_delay = find_observation_delay(env)
        if self.delay_wrapper is None and self.observation_delay is None:
            raise ValueError(
                f"PendingActionsObservation needs an ExecutionDelay below it (or an ObservationDelay), found none "
                f"in {_stack_names(env)}; wrap the env first: PendingActionsObservation(ExecutionDelay(env, delay))"
            )
        self.max_delay = self.delay_wrapper.max_delay if self.delay_wrapper is not None else 0
        self.max_obs_delay = self.observation_delay.max_delay if self.observation_delay is not None else 0
        action_space = env.action_space
        m = max(self.max_obs_delay + self.max_delay, 1)  # one constant slot at 0 keeps the space non-empty
        start: np.ndarray
        if isinstance(action_space, spaces.Discrete):
            pending_space: spaces.Space = spaces.MultiDiscrete(np.full(m, action_space.n, dtype=np.int64))
            start = np.full(m, action_space.start, dtype=np.int64)
        elif isinstance(action_space, spaces.MultiDiscrete):
            pending_space = spaces.MultiDiscrete(np.tile(action_space.nvec.reshape(-1), m).astype(np.int64))
            start = np.tile(np.asarray(action_space.start, dtype=np.int64).reshape(-1), m)
        elif isinstance(action_space, spaces.Box):
            low = np.tile(np.minimum(action_space.low, 0).reshape(-1), m)
            high = np.tile(np.maximum(action_space.high, 0).reshape(-1), m)
            dtype: Any = action_space.dtype
            pending_space = spaces.Box(low, high, dtype=dtype)
            start = np.zeros(0)
        else:  # the delay wrappers accept no other kind
            raise TypeError(
                f"PendingActionsObservation supports Discrete, MultiDiscrete and Box actions, got {action_space}"
            )
        self._start: np.ndarray | None = start if start.any() else None
        self._pending_shape: tuple[int, ...] = tuple(pending_space.shape or ())
        self._pending_dtype = np.dtype(pending_space.dtype)
        views: dict[str, spaces.Space] = {
            "observation": env.observation_space,
            "pending_actions": pending_space,
            "delay": spaces.Discrete(self.max_delay + 1),
        }
        if self.observation_delay is not None:
            views["obs_delay"] = spaces.Discrete(self.max_obs_delay + 1)
        self.observation_space = spaces.Dict(views)

    def observation(self, observation: Any) -> dict[str, Any]:
        unobserved = self.observation_delay.unobserved_actions() if self.observation_delay is not None else None
        queued = self.delay_wrapper.pending_actions() if self.delay_wrapper is not None else None
        pending = np.concatenate([part for part in (unobserved, queued) if part is not None])
        padded = np.zeros(self._pending_shape, dtype=self._pending_dtype)
        size = pending.size
        if size:
            padded[:size] = pending.reshape(-1)
            if self._start is not None:
                padded[:size] -= self._start[:size]
        view = {"observation": observation, "pending_actions": padded, "delay": 0 if queued is None else len(queued)}
        if unobserved is not None:
            view["obs_delay"] = len(unobserved)
        return view
