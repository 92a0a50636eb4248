"""The agent-side view of the execution-delay queue, as a ``Dict`` observation."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from delayzoo.wrappers.delay import ExecutionDelay

__all__ = ["PendingActionsObservation", "find_execution_delay"]


def find_execution_delay(env: gym.Env) -> ExecutionDelay | None:
    """The outermost :class:`ExecutionDelay` in a stack of Gymnasium wrappers, or ``None``."""
    while True:
        if isinstance(env, ExecutionDelay):
            return env
        if not isinstance(env, gym.Wrapper):
            return None
        env = env.env


def _stack_names(env: gym.Env) -> str:
    names = []
    while isinstance(env, gym.Wrapper):
        names.append(type(env).__name__)
        env = env.env
    names.append(str(env.unwrapped.spec.id if env.unwrapped.spec else type(env.unwrapped).__name__))
    return " -> ".join(names)


class PendingActionsObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Give the agent the pending-action queue of the :class:`ExecutionDelay` below it.

    Observations become a ``Dict`` for SB3's ``MultiInputPolicy`` and for DelayedEZ:

    - ``"observation"``: the env's observation, unchanged (observations are never delayed);
    - ``"pending_actions"``: the actions that will be executed before the next decision takes effect,
      padded to ``max_delay`` entries with 0 beyond the current delay (at ``max_delay=0`` one entry,
      always 0: SB3's policies cannot take empty vectors, so the space keeps a constant slot).
      Discrete actions are stored as their index in the space (``action - start``) in a
      ``MultiDiscrete``; ``MultiDiscrete`` and ``Box`` actions are flattened, oldest first, into one
      1-D ``MultiDiscrete`` or ``Box`` (SB3 policies take 1-D vectors);
    - ``"delay"``: the delay of the next decision, ``Discrete(max_delay + 1)``.

    >>> from delayzoo.wrappers import ExecutionDelay
    >>> env = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), delay=3))
    >>> obs, info = env.reset(seed=0)
    >>> sorted(obs), obs["pending_actions"].shape
    (['delay', 'observation', 'pending_actions'], (3,))
    >>> PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), delay=0)).observation_space["pending_actions"]
    MultiDiscrete([2])
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        delay_wrapper = find_execution_delay(env)
        if delay_wrapper is None:
            raise ValueError(
                f"PendingActionsObservation needs an ExecutionDelay below it, found none in {_stack_names(env)}; "
                "wrap the env first: PendingActionsObservation(ExecutionDelay(env, delay))"
            )
        self.delay_wrapper = delay_wrapper
        self.max_delay = delay_wrapper.max_delay
        action_space = delay_wrapper.action_space
        m = max(self.max_delay, 1)  # one constant slot at max_delay 0 keeps the space non-empty
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
        else:  # ExecutionDelay accepts no other kind
            raise TypeError(
                f"PendingActionsObservation supports Discrete, MultiDiscrete and Box actions, got {action_space}"
            )
        self._start: np.ndarray | None = start if start.any() else None
        self._pending_shape: tuple[int, ...] = tuple(pending_space.shape or ())
        self._pending_dtype = np.dtype(pending_space.dtype)
        self.observation_space = spaces.Dict(
            {
                "observation": env.observation_space,
                "pending_actions": pending_space,
                "delay": spaces.Discrete(self.max_delay + 1),
            }
        )

    def observation(self, observation: Any) -> dict[str, Any]:
        pending = self.delay_wrapper.pending_actions()
        padded = np.zeros(self._pending_shape, dtype=self._pending_dtype)
        size = pending.size
        if size:
            padded[:size] = pending.reshape(-1)
            if self._start is not None:
                padded[:size] -= self._start[:size]
        return {"observation": observation, "pending_actions": padded, "delay": len(pending)}
