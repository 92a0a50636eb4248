"""Execution delay: the one home of the delay semantics (DESIGN.md section 3).

At step ``t`` the agent decides ``a_t``; a delay process has already announced ``d_t`` in
``{0..max_delay}``, so ``a_t`` is due at step ``t + d_t``. The env executes ``e_t``: the most recently
decided action that is due, i.e. ``a_j`` with the largest ``j <= t`` such that ``j + d_j <= t``.
A delay drop can let a newer action overtake an older one (which is then never executed); a delay
rise can leave no new action due (the previous ``e`` is executed again). After ``reset``,
``max_delay`` filler actions decided at virtual times ``-M..-1`` with delay ``M`` fill the queue.

:class:`ActionQueue` implements that rule and nothing else, so the wrapper and the agents share it;
:class:`ExecutionDelay` is the Gymnasium wrapper around it.
"""

from __future__ import annotations

import copy
import numbers
from collections.abc import Callable, Sequence
from typing import Any, Protocol, SupportsFloat, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "DelayProcess",
    "ConstantDelay",
    "RandomWalkDelay",
    "IIDDelay",
    "ActionQueue",
    "ExecutionDelay",
]


def _check_int(value: Any, name: str, low: int = 0, high: int | None = None) -> int:
    """Return ``value`` as ``int`` if it is an integer in ``[low, high]``, else raise naming it."""
    if type(value) is not int:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
        value = int(value)
    if value < low or (high is not None and value > high):
        bounds = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name} must be in {bounds}, got {value}")
    return value


@runtime_checkable
class DelayProcess(Protocol):
    """What :class:`ExecutionDelay` needs from a delay process.

    ``reset(rng)`` gives the delay of the first decision of an episode, ``step(rng)`` the delay of
    each following one; both draw randomness only from the generator they are given, so every env
    follows its own, seedable path. Values must be integers in ``[0, max_delay]``.
    """

    max_delay: int

    def reset(self, rng: np.random.Generator) -> int: ...

    def step(self, rng: np.random.Generator) -> int: ...


class ConstantDelay:
    """The same delay ``d`` for every decision: action ``a_t`` is executed at ``t + d``.

    >>> ConstantDelay(3).reset(np.random.default_rng(0))
    3
    """

    def __init__(self, delay: int) -> None:
        self.delay = _check_int(delay, "delay")
        self.max_delay = self.delay

    def reset(self, rng: np.random.Generator) -> int:
        return self.delay

    def step(self, rng: np.random.Generator) -> int:
        return self.delay

    def __repr__(self) -> str:
        return f"ConstantDelay({self.delay})"


class RandomWalkDelay:
    """A delay that drifts: each step -1 with probability ``p``, +1 with probability ``p``.

    The walk is clipped to ``[min_delay, max_delay]`` and restarts at ``start`` (default
    ``max_delay``) on every reset. This is Delayed-EfficientZero's delay process, with ``p`` honoured.

    >>> process = RandomWalkDelay(max_delay=5, p=0.2)
    >>> process.reset(np.random.default_rng(0))
    5
    """

    def __init__(self, max_delay: int, p: float = 0.2, min_delay: int = 0, start: int | None = None) -> None:
        self.max_delay = _check_int(max_delay, "max_delay")
        self.min_delay = _check_int(min_delay, "min_delay")
        if self.min_delay > self.max_delay:
            raise ValueError(f"min_delay must not exceed max_delay, got min_delay={min_delay} > max_delay={max_delay}")
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 0.5:
            raise ValueError(f"p must be a probability in [0, 0.5] (p of -1 and p of +1), got p={p!r}")
        self.p: float = float(p)
        if start is not None:
            start = _check_int(start, "start", self.min_delay, self.max_delay)
        self.start: int = self.max_delay if start is None else start
        self._delay: int = self.start

    def reset(self, rng: np.random.Generator) -> int:
        self._delay = self.start
        return self._delay

    def step(self, rng: np.random.Generator) -> int:
        u = rng.random()
        if u < self.p:
            self._delay = max(self._delay - 1, self.min_delay)
        elif u < 2.0 * self.p:
            self._delay = min(self._delay + 1, self.max_delay)
        return self._delay

    def __repr__(self) -> str:
        return (
            f"RandomWalkDelay(max_delay={self.max_delay}, p={self.p}, min_delay={self.min_delay}, start={self.start})"
        )


class IIDDelay:
    """A delay drawn independently for every decision from ``values`` with probabilities ``probs``.

    ``probs`` defaults to uniform. Delays may fall by more than one step between decisions, so the
    wrapper's ``pending_actions`` is a forecast (a later decision can overtake those actions).

    >>> IIDDelay([0, 2], probs=[0.5, 0.5]).max_delay
    2
    """

    def __init__(self, values: Sequence[int], probs: Sequence[float] | None = None) -> None:
        if len(values) == 0:
            raise ValueError("values must hold at least one delay, got an empty sequence")
        self.values = np.array([_check_int(v, "each delay in values") for v in values], dtype=np.int64)
        if probs is None:
            self.probs = np.full(len(self.values), 1.0 / len(self.values))
        else:
            self.probs = np.asarray(probs, dtype=np.float64)
            if self.probs.shape != self.values.shape:
                raise ValueError(f"probs must have one entry per value ({len(self.values)}), got {list(probs)}")
            if not np.all(np.isfinite(self.probs)) or np.any(self.probs < 0) or not np.isclose(self.probs.sum(), 1.0):
                raise ValueError(f"probs must be non-negative and sum to 1, got {list(probs)}")
        self.max_delay = int(self.values.max())

    def reset(self, rng: np.random.Generator) -> int:
        return self.step(rng)

    def step(self, rng: np.random.Generator) -> int:
        return int(self.values[rng.choice(len(self.values), p=self.probs)])

    def __repr__(self) -> str:
        return f"IIDDelay(values={self.values.tolist()}, probs={self.probs.tolist()})"


class ActionQueue:
    """The rule that picks the executed action, kept as a schedule of the steps ahead.

    ``schedule[k]`` is the action to execute at step ``t + k`` (``k = 0..max_delay``) given the
    decisions so far: the newest decision due by then. A new decision ``a_t`` with delay ``d_t`` is the
    newest of all, so it claims every step from ``t + d_t`` on; anything it displaces is overtaken.
    Each step costs a few array operations, whatever the delay.

    >>> queue = ActionQueue(max_delay=2)
    >>> queue.reset([7, 8])              # fillers, executed at steps 0 and 1
    >>> [queue.push(a, 2) for a in (1, 2, 3)]
    [7, 8, 1]
    >>> queue.forecast(2).tolist()       # executed at the next two steps unless overtaken
    [2, 3]
    """

    def __init__(self, max_delay: int, shape: tuple[int, ...] = (), dtype: Any = np.int64) -> None:
        self.max_delay = _check_int(max_delay, "max_delay")
        self._schedule = np.zeros((self.max_delay + 1, *shape), dtype=dtype)
        self.t = 0

    def reset(self, fillers: Sequence[Any]) -> None:
        """Start an episode: ``max_delay`` fillers decided at ``-M..-1`` with delay ``M``."""
        if len(fillers) != self.max_delay:
            raise ValueError(f"expected {self.max_delay} filler actions, got {len(fillers)}")
        if self.max_delay:
            self._schedule[:-1] = fillers
            self._schedule[-1] = fillers[-1]
        self.t = 0

    def push(self, action: Any, delay: int) -> Any:
        """Record decision ``a_t`` with delay ``d_t``, advance to ``t + 1`` and return ``e_t``."""
        schedule = self._schedule
        schedule[delay:] = action
        executed = schedule.item(0) if schedule.ndim == 1 else schedule[0].copy()
        schedule[:-1] = schedule[1:]
        self.t += 1
        return executed

    def forecast(self, horizon: int) -> np.ndarray:
        """Actions that will be executed at steps ``t .. t+horizon-1`` if no newer decision overtakes them.

        Exact when the delay falls by at most one per step (constant delays, random walks).
        """
        return self._schedule[:horizon].copy()


InitAction = str | Any | Callable[[Any], Any]


class ExecutionDelay(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Execute each action some steps after it is chosen, with a constant or stochastic delay.

    ``info`` holds, on reset and every step, ``"delay"`` (the delay the next decision will get) and
    ``"pending_actions"`` (the actions that will be executed before that decision takes effect, one
    per step: its first ``delay`` rows; the array always has ``max_delay`` rows, the rest zeros, so
    that Gymnasium's ``SyncVectorEnv``/``AsyncVectorEnv`` can stack the infos of their envs); on
    steps also ``"executed_action"``. :meth:`pending_actions` gives the unpadded array. Observations are
    never delayed. The wrapper keeps its own copy of the delay process, which draws from the
    wrapper's own generator, seeded by ``reset(seed=...)``: the base env's random stream is the same
    with or without the wrapper, and every env of a vector env follows its own delay path.

    :param env: the environment whose actions are delayed.
    :param delay: an ``int`` (constant delay) or a delay process (:class:`ConstantDelay`,
        :class:`RandomWalkDelay`, :class:`IIDDelay`, or any :class:`DelayProcess`).
    :param init_action: what fills the queue at reset: ``"noop"`` (action 0, or zeros for ``Box``),
        ``"random"`` (drawn from the seeded action space), a fixed action, or a callable of the first
        observation returning one action.

    >>> env = ExecutionDelay(gym.make("CartPole-v1"), delay=RandomWalkDelay(max_delay=5, p=0.2))
    >>> obs, info = env.reset(seed=0)
    >>> info["delay"], info["pending_actions"].shape
    (5, (5,))
    >>> info["pending_actions"][: info["delay"]].shape == env.pending_actions().shape
    True
    """

    def __init__(self, env: gym.Env, delay: int | DelayProcess, init_action: InitAction = "noop") -> None:
        gym.utils.RecordConstructorArgs.__init__(self, delay=delay, init_action=init_action)
        gym.Wrapper.__init__(self, env)
        process: Any = delay
        if isinstance(process, (numbers.Integral, float, bool, np.floating)):
            process = ConstantDelay(process)  # type: ignore[arg-type]  # it raises, naming the value, for non-integers
        for attribute in ("max_delay", "reset", "step"):
            if not hasattr(process, attribute):
                raise TypeError(
                    f"delay must be an int or a delay process with max_delay, reset(rng) and step(rng); "
                    f"{process!r} has no {attribute!r}"
                )
        self.delay_process: DelayProcess = copy.deepcopy(process)
        self.max_delay = _check_int(process.max_delay, "delay process max_delay")
        self._action_dtype, self._action_shape = self._describe(env.action_space)
        self._init_action = self._check_init_action(init_action)
        self.queue = ActionQueue(self.max_delay, self._action_shape, self._action_dtype)
        self.delay_rng = np.random.default_rng()
        self._filler_space = _copy_space(env.action_space)
        self._delay = self.max_delay
        self._pending = np.zeros((0, *self._action_shape), dtype=self._action_dtype)

    @staticmethod
    def _describe(space: spaces.Space) -> tuple[np.dtype, tuple[int, ...]]:
        if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.Box)):
            return np.dtype(space.dtype), tuple(space.shape or ())
        raise TypeError(
            f"ExecutionDelay supports Discrete, MultiDiscrete and Box action spaces, got {space}"
        )

    def _check_init_action(self, init_action: InitAction) -> InitAction:
        if isinstance(init_action, str):
            if init_action == "noop":
                noop = _noop(self.env.action_space)
                if not self.env.action_space.contains(noop):
                    raise ValueError(
                        f"init_action='noop' means {noop!r}, which is outside the action space "
                        f"{self.env.action_space}; pass init_action='random' or a fixed action"
                    )
                return noop
            if init_action == "random":
                return init_action
            raise ValueError(f"init_action must be 'noop', 'random', an action or a callable, got {init_action!r}")
        if callable(init_action):
            return init_action
        return self._check_action(init_action, "init_action")

    def _check_action(self, action: Any, name: str = "action") -> Any:
        """``action`` as the queue stores it (an ``int``, or an array copy), or a ``ValueError``."""
        space = self.env.action_space
        if isinstance(space, spaces.Discrete):
            if isinstance(action, np.ndarray) and action.shape in ((), (1,)):
                action = action.reshape(()).item()
            if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
                if 0 <= action - space.start < space.n:
                    return int(action)
            raise ValueError(f"{name} {action!r} is outside the action space {space}")
        array = np.asarray(action)
        if array.shape != self._action_shape or not space.contains(array.astype(self._action_dtype)):
            raise ValueError(f"{name} {action!r} is outside the action space {space}")
        return array.astype(self._action_dtype)  # a copy: the caller may reuse its buffer

    def _fillers(self, observation: Any) -> list[Any]:
        if isinstance(self._init_action, str):
            return [self._filler_space.sample() for _ in range(self.max_delay)]
        if callable(self._init_action):
            action = self._check_action(self._init_action(observation), "init_action(observation)")
        else:
            action = self._init_action
        return [action] * self.max_delay

    def pending_actions(self) -> np.ndarray:
        """The ``delay`` actions to be executed before the next decision can take effect."""
        return self._pending

    def _announce(self, delay: Any, info: dict[str, Any]) -> None:
        """Take the next decision's delay from the process and report it with the pending queue."""
        if type(delay) is not int or not 0 <= delay <= self.max_delay:
            delay = _check_int(delay, f"delay from {self.delay_process!r}", 0, self.max_delay)
        self._delay = delay
        self._pending = self.queue.forecast(self._delay)
        padded = np.zeros((self.max_delay, *self._action_shape), dtype=self._action_dtype)
        padded[: self._delay] = self._pending
        info["delay"] = self._delay
        info["pending_actions"] = padded

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            delay_seed, filler_seed = np.random.SeedSequence(seed, spawn_key=(0x5E1A7,)).spawn(2)
            self.delay_rng = np.random.default_rng(delay_seed)
            self._filler_space.seed(int(filler_seed.generate_state(1)[0]))
        observation, info = self.env.reset(seed=seed, options=options)
        self.queue.reset(self._fillers(observation))
        self._announce(self.delay_process.reset(self.delay_rng), info)
        return observation, info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        executed = self.queue.push(self._check_action(action), self._delay)
        observation, reward, terminated, truncated, info = self.env.step(executed)
        info["executed_action"] = executed
        self._announce(self.delay_process.step(self.delay_rng), info)
        return observation, reward, terminated, truncated, info


def _noop(space: spaces.Space) -> Any:
    if isinstance(space, spaces.Discrete):
        return int(space.start)
    if isinstance(space, spaces.MultiDiscrete):
        return np.array(space.start, dtype=space.dtype)
    return np.zeros(space.shape, dtype=space.dtype)


def _copy_space(space: spaces.Space) -> spaces.Space:
    """An independent copy of ``space`` whose sampler the wrapper seeds (the user's stays untouched)."""
    if isinstance(space, spaces.Discrete):
        return spaces.Discrete(int(space.n), start=int(space.start))
    if isinstance(space, spaces.MultiDiscrete):
        return spaces.MultiDiscrete(space.nvec, dtype=space.dtype, start=space.start)
    if isinstance(space, spaces.Box):
        dtype: Any = space.dtype
        return spaces.Box(space.low, space.high, dtype=dtype)
    raise TypeError(f"ExecutionDelay supports Discrete, MultiDiscrete and Box action spaces, got {space}")
