"""Execution and observation delays: the one home of the delay semantics (DESIGN.md section 3).

At step ``t`` the agent decides ``a_t``; a delay process has already announced ``d_t`` in
``{0..max_delay}``, so ``a_t`` is due at step ``t + d_t``. The env executes ``e_t``: the most recently
decided action that is due, i.e. ``a_j`` with the largest ``j <= t`` such that ``j + d_j <= t``.
A delay drop can let a newer action overtake an older one (which is then never executed); a delay
rise can leave no new action due (the previous ``e`` is executed again). After ``reset``,
``max_delay`` filler actions decided at virtual times ``-M..-1`` with delay ``M`` fill the queue.

:class:`ActionQueue` implements that rule and nothing else, so the wrapper and the agents share it;
:class:`ExecutionDelay` is the Gymnasium wrapper around it. :class:`ObservationDelay` delays what the
agent sees instead (its rule is in its docstring); both draw their delays from the same processes,
:class:`TraceDelay` among them, which replays a recorded trace.
"""

from __future__ import annotations

import copy
import csv
import math
import numbers
import os
import pathlib
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol, SupportsFloat, TypeVar, runtime_checkable

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from delayzoo.checks import check_int

__all__ = [
    "DelayProcess",
    "ConstantDelay",
    "RandomWalkDelay",
    "IIDDelay",
    "TraceDelay",
    "example_trace_path",
    "ActionQueue",
    "ExecutionDelay",
    "ObservationDelay",
    "MAX_DELAY",
    "find_wrapper",
]

MAX_DELAY = 10_000
"""The largest delay a wrapper holds, in steps: its queue and the padded arrays of its ``info`` have that many
rows, so a larger maximum (a latency trace read at a tiny step, say) is refused rather than allocated."""


@runtime_checkable
class DelayProcess(Protocol):
    """What :class:`ExecutionDelay` and :class:`ObservationDelay` need from a delay process.

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
        self.delay = check_int(delay, "delay")
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
        self.max_delay = check_int(max_delay, "max_delay")
        self.min_delay = check_int(min_delay, "min_delay")
        if self.min_delay > self.max_delay:
            raise ValueError(f"min_delay must not exceed max_delay, got min_delay={min_delay} > max_delay={max_delay}")
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 0.5:
            raise ValueError(f"p must be a probability in [0, 0.5] (p of -1 and p of +1), got p={p!r}")
        self.p: float = float(p)
        if start is not None:
            start = check_int(start, "start", self.min_delay, self.max_delay)
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
        self.values = np.array([check_int(v, "each delay in values") for v in values], dtype=np.int64)
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


class TraceDelay:
    """Replay a recorded sequence of per-step delays, such as the latencies of a real network link.

    ``reset`` starts the replay at an offset drawn from the generator when ``loop`` is true (the trace
    then wraps around at its end, so every episode sees a different stretch of it), else at the first
    entry, with the last entry repeated after the end. ``max_delay`` is the largest entry.
    :meth:`from_latencies` turns measured latencies into steps, :meth:`from_csv` reads a column of a
    file; :func:`example_trace_path` is a trace that ships with delayzoo.

    >>> process = TraceDelay([2, 0, 1], loop=False)
    >>> rng = np.random.default_rng(0)
    >>> [process.reset(rng)] + [process.step(rng) for _ in range(4)]
    [2, 0, 1, 1, 1]
    """

    def __init__(self, delays: Sequence[int] | np.ndarray, loop: bool = True) -> None:
        if isinstance(delays, (str, bytes)) or not isinstance(delays, (Sequence, np.ndarray)):
            raise TypeError(f"delays must be a sequence of integers, got {delays!r} ({type(delays).__name__})")
        if not isinstance(loop, (bool, np.bool_)):
            raise TypeError(f"loop must be True or False, got {loop!r}")
        if len(delays) == 0:
            raise ValueError("delays must hold at least one delay, got an empty sequence")
        self.delays = np.array(
            [check_int(d, f"delays[{i}]", 0, MAX_DELAY) for i, d in enumerate(delays)], dtype=np.int64
        )
        self.loop = bool(loop)
        self.max_delay = int(self.delays.max())
        self._position = 0

    @classmethod
    def from_latencies(
        cls,
        latencies: Sequence[float] | np.ndarray,
        step_duration: float,
        max_delay: int | None = None,
        loop: bool = True,
    ) -> TraceDelay:
        """The trace of measured latencies, each rounded up to whole steps of ``step_duration``.

        A latency that ends inside a step is seen at the next one, hence rounding up. ``step_duration``
        is in the latencies' unit; with ``max_delay`` each delay is capped at it (before any conversion to
        integers, so a huge latency is simply the cap). Without ``max_delay``, a latency of more than
        :data:`MAX_DELAY` steps is refused, naming it.

        >>> TraceDelay.from_latencies([0.0, 0.01, 0.02, 0.05, 0.3], step_duration=0.02, max_delay=5).delays.tolist()
        [0, 1, 1, 3, 5]
        """
        if isinstance(step_duration, bool) or not isinstance(step_duration, numbers.Real) or not (
            0 < float(step_duration) < math.inf
        ):
            raise ValueError(f"step_duration must be a positive finite number, got {step_duration!r}")
        try:
            values = np.asarray(latencies, dtype=np.float64)
        except (TypeError, ValueError) as error:
            raise ValueError(f"latencies must be a sequence of numbers ({error})") from None
        if latencies is None or values.ndim != 1:
            raise ValueError(f"latencies must be a one-dimensional sequence of numbers, got {latencies!r}")
        if values.size == 0:
            raise ValueError("latencies must hold at least one latency, got an empty sequence")
        bad = ~np.isfinite(values) | (values < 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(f"latencies must be finite and >= 0, got latencies[{i}] = {float(values[i])!r}")
        cap = float(MAX_DELAY) if max_delay is None else float(check_int(max_delay, "max_delay", 0, MAX_DELAY))
        # 1e-9 of a step keeps a latency of whole steps (0.06 / 0.02 = 3.0000000000000004) at that many steps
        with np.errstate(over="ignore"):
            steps = np.ceil(values / float(step_duration) - 1e-9)
        if max_delay is None and (steps > cap).any():
            i = int(np.flatnonzero(steps > cap)[0])
            raise ValueError(
                f"latencies[{i}] = {float(values[i])!r} is {steps[i]:.3g} steps of {step_duration!r}, above the "
                f"{MAX_DELAY} steps a delay wrapper holds; pass max_delay to cap the delays"
            )
        return cls(np.clip(steps, 0.0, cap).astype(np.int64).tolist(), loop=loop)

    @classmethod
    def from_csv(cls, path: str | os.PathLike[str], column: str | int = "delay", loop: bool = True) -> TraceDelay:
        """The per-step delays in ``column`` of a comma-separated file whose first row names the columns.

        Blank lines and a UTF-8 byte-order mark are skipped; every other row must have as many cells as the
        header, and its ``column`` cell must be an integer delay. A bad file is a ``ValueError`` naming the
        file, the line and the column (a missing one is the ``FileNotFoundError`` of ``open``).

        :param path: the file (:func:`example_trace_path` is one)
        :param column: a name of the first row, or a column's index from 0
        :param loop: as for :class:`TraceDelay`
        """
        try:
            with open(path, newline="", encoding="utf-8-sig") as file:
                reader = csv.reader(file)
                rows = [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
        except UnicodeDecodeError as error:
            raise ValueError(f"{path} is not a UTF-8 text file ({error})") from None
        except csv.Error as error:
            raise ValueError(f"{path} is not a readable CSV file ({error})") from None
        if not rows:
            raise ValueError(f"{path} is empty; expected a row of column names, then one delay per row")
        (_, header), *values = rows
        header = [name.strip() for name in header]
        if isinstance(column, str):
            if column not in header:
                hint = ""
                if len(header) == 1 and any(mark in header[0] for mark in ";\t|"):
                    hint = " (columns must be separated by commas)"
                raise ValueError(f"{path} has no column {column!r}; its columns are {header}{hint}")
            index = header.index(column)
        else:
            try:
                index = check_int(column, "column", 0, len(header) - 1)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{path} has the columns {header}: {error}") from None
        name = f"column {header[index]!r}"
        if not values:
            raise ValueError(f"{path} has no delays in {name}: only the header row {header}")
        delays = []
        for line, row in values:
            if len(row) != len(header):
                raise ValueError(
                    f"{path} line {line} has {len(row)} cell(s), {row}, where the header has {len(header)}, {header}"
                )
            delays.append(_parse_int(row[index].strip(), f"{path} line {line}, {name}"))
        return cls(delays, loop=loop)

    def reset(self, rng: np.random.Generator) -> int:
        self._position = int(rng.integers(len(self.delays))) if self.loop else 0
        return int(self.delays[self._position])

    def step(self, rng: np.random.Generator) -> int:
        if self.loop:
            self._position = (self._position + 1) % len(self.delays)
        else:
            self._position = min(self._position + 1, len(self.delays) - 1)
        return int(self.delays[self._position])

    def __repr__(self) -> str:
        return f"TraceDelay(<{len(self.delays)} delays, max {self.max_delay}>, loop={self.loop})"


def _parse_int(text: str, where: str) -> int:
    """The integer a CSV cell holds; a number that is not an integer is the ``TypeError`` of :func:`_check_int`."""
    try:
        number: float = int(text)
    except ValueError:
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"the delay at {where} must be an integer, got {text!r}") from None
    return check_int(number, f"the delay at {where}", 0, MAX_DELAY)


def example_trace_path() -> pathlib.Path:
    """A per-step delay trace that ships with delayzoo, for tests and examples (``TraceDelay.from_csv(path)``).

    Its columns are ``latency_ms`` and ``delay`` (the latency in 20 ms steps, rounded up, at most 6); we
    generated it from a stated model of a congested wireless link, not from measurements:
    ``delayzoo/wrappers/data/README.md`` gives the model and ``make_example_trace.py`` beside it remakes it.
    """
    return pathlib.Path(__file__).with_name("data") / "example_trace.csv"


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
        self.max_delay = check_int(max_delay, "max_delay")
        self._shape, self._dtype = tuple(shape), np.dtype(dtype)
        # a Python list, not an array: a step then costs list operations and no NumPy call, which stepping a
        # fast emulator (ALE) made the larger part of the wrapper's cost
        self._schedule: list[Any] = [self._stored(np.zeros(self._shape, self._dtype))] * (self.max_delay + 1)
        self.t = 0

    def _stored(self, action: Any) -> Any:
        """An action as the schedule holds it: a Python scalar, or an array of the queue's dtype."""
        if self._shape:
            return np.array(action, dtype=self._dtype)
        return action if type(action) is int and self._dtype.kind in "iu" else self._dtype.type(action).item()

    def reset(self, fillers: Sequence[Any]) -> None:
        """Start an episode: ``max_delay`` fillers decided at ``-M..-1`` with delay ``M``."""
        if len(fillers) != self.max_delay:
            raise ValueError(f"expected {self.max_delay} filler actions, got {len(fillers)}")
        if self.max_delay:
            stored = [self._stored(filler) for filler in fillers]
            self._schedule = [*stored, stored[-1]]
        self.t = 0

    def push(self, action: Any, delay: int) -> Any:
        """Record decision ``a_t`` with delay ``d_t``, advance to ``t + 1`` and return ``e_t``."""
        schedule = self._schedule
        schedule[delay:] = [self._stored(action)] * (len(schedule) - delay)
        executed = schedule[0]
        schedule.append(schedule[-1])  # the newest decision stays due past the horizon
        del schedule[0]
        self.t += 1
        return executed.copy() if self._shape else executed

    def forecast(self, horizon: int, rows: int | None = None) -> np.ndarray:
        """Actions that will be executed at steps ``t .. t+horizon-1`` if no newer decision overtakes them, in a
        new array of ``rows`` rows (default ``horizon``; the rows past ``horizon`` are zeros).

        Exact when the delay falls by at most one per step (constant delays, random walks).
        """
        rows = horizon if rows is None else rows
        if not self._shape:
            return np.array(self._schedule[:horizon] + [0] * (rows - horizon), dtype=self._dtype)
        padded = np.zeros((rows, *self._shape), dtype=self._dtype)
        if horizon:
            padded[:horizon] = self._schedule[:horizon]
        return padded


InitAction = str | Any | Callable[[Any], Any]
_WrapperT = TypeVar("_WrapperT", bound=gym.Wrapper)


def find_wrapper(env: gym.Env, kind: type[_WrapperT]) -> _WrapperT | None:
    """The outermost wrapper of type ``kind`` in a stack of Gymnasium wrappers, or ``None``."""
    while True:
        if isinstance(env, kind):
            return env
        if not isinstance(env, gym.Wrapper):
            return None
        env = env.env


def _as_delay_process(delay: int | DelayProcess) -> tuple[DelayProcess, int]:
    """A wrapper's own copy of the delay process ``delay`` describes (an ``int`` is a constant), and its maximum."""
    process: Any = delay
    if isinstance(process, (numbers.Integral, float, bool, np.floating)):
        process = ConstantDelay(process)  # type: ignore[arg-type]  # it raises, naming the value, for non-integers
    for attribute in ("max_delay", "reset", "step"):
        if not hasattr(process, attribute):
            raise TypeError(
                f"delay must be an int or a delay process with max_delay, reset(rng) and step(rng); "
                f"{process!r} has no {attribute!r}"
            )
    return copy.deepcopy(process), check_int(process.max_delay, "delay process max_delay", 0, MAX_DELAY)


def _checked_delay(delay: Any, process: DelayProcess, max_delay: int) -> int:
    """``delay`` as drawn from ``process``, or an error naming both when it is not an integer in ``[0, max_delay]``."""
    if type(delay) is not int or not 0 <= delay <= max_delay:
        delay = check_int(delay, f"delay from {process!r}", 0, max_delay)
    return delay


def _action_layout(space: spaces.Space, wrapper: str) -> tuple[np.dtype, tuple[int, ...]]:
    """The dtype and shape in which ``wrapper`` stores actions of ``space``; only fixed-shape spaces are supported."""
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.Box)):
        return np.dtype(space.dtype), tuple(space.shape or ())
    raise TypeError(f"{wrapper} supports Discrete, MultiDiscrete and Box action spaces, got {space}")


def _check_action(space: spaces.Space, shape: tuple[int, ...], dtype: np.dtype, action: Any, name: str) -> Any:
    """``action`` as a queue stores it (an ``int``, or an array copy), or a ``ValueError`` naming it."""
    if type(action) is int and type(space) is spaces.Discrete and 0 <= action - space.start < space.n:
        return action  # the common case, first
    if isinstance(space, spaces.Discrete):
        if isinstance(action, np.ndarray) and action.shape in ((), (1,)):
            action = action.reshape(()).item()
        if isinstance(action, (int, np.integer)) and not isinstance(action, bool):
            if 0 <= action - space.start < space.n:
                return int(action)
        raise ValueError(f"{name} {action!r} is outside the action space {space}")
    array = np.asarray(action)
    if array.shape != shape or not space.contains(array.astype(dtype)):
        raise ValueError(f"{name} {action!r} is outside the action space {space}")
    return array.astype(dtype)  # a copy: the caller may reuse its buffer


def _padded(actions: np.ndarray, rows: int) -> np.ndarray:
    """``actions`` followed by zero rows up to ``rows`` rows: a fixed shape that vector envs can stack."""
    padded = np.zeros((rows, *actions.shape[1:]), dtype=actions.dtype)
    padded[: len(actions)] = actions
    return padded


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
        if find_wrapper(env, ObservationDelay) is not None:
            raise ValueError(
                "ExecutionDelay cannot wrap an ObservationDelay: actions are delayed on their way to the env, "
                "observations on their way back; wrap as ObservationDelay(ExecutionDelay(env, delay), obs_delay)"
            )
        self.delay_process, self.max_delay = _as_delay_process(delay)
        self._action_dtype, self._action_shape = _action_layout(env.action_space, "ExecutionDelay")
        self._space = env.action_space  # looked up once: each step checks the action against it
        self._init_action = self._check_init_action(init_action)
        self.queue = ActionQueue(self.max_delay, self._action_shape, self._action_dtype)
        self.delay_rng = np.random.default_rng()
        self._filler_space = _copy_space(env.action_space)
        self._delay = self.max_delay

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
        return _check_action(self._space, self._action_shape, self._action_dtype, action, name)

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
        return self.queue.forecast(self._delay)  # the queue does not move between a step and the next decision

    def _announce(self, delay: Any, info: dict[str, Any]) -> None:
        """Take the next decision's delay from the process and report it with the pending queue."""
        self._delay = _checked_delay(delay, self.delay_process, self.max_delay)
        info["delay"] = self._delay
        info["pending_actions"] = self.queue.forecast(self._delay, rows=self.max_delay)

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


Arrival = tuple[Any, float, Any]
"""One step's ``(observation, reward, executed action)``, as :class:`ObservationDelay` delivers it."""


class ObservationDelay(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Show each observation some steps late, with a constant or stochastic delay; actions act at once.

    The rule (reset is step 0, and shows the reset observation: ``s_0 = 0``; the process's ``reset`` value
    is drawn and not used): at each step ``t >= 1`` the process gives ``d_t`` and the agent is shown the
    env's observation of step ``s_t = max(s_{t-1}, t - d_t)``, so observations arrive in order and never
    go back in time. The reward is the sum of the rewards of the steps that arrive, ``s_{t-1}+1 .. s_t``:
    rewards travel with their observations. When the env terminates or truncates at step ``T``, every step
    arrives (``s_T = T``): the env's final observation is shown with the rewards not yet delivered, so an
    episode's return and length are the undelayed env's.

    ``info`` holds, on reset and every step, ``"obs_delay"`` (``t - s_t``), ``"unobserved_actions"`` (the
    actions executed at steps ``s_t+1 .. t``, oldest first, padded with zeros to ``max_delay`` rows as
    :class:`ExecutionDelay` pads ``"pending_actions"``; :meth:`unobserved_actions` gives them unpadded) and
    ``"arrived"`` (``(observation, reward, executed action)`` of each step that arrived, in step order: the
    undelayed trajectory, for an agent that stores it); the env's own keys of the current step pass through.
    Over an :class:`ExecutionDelay` (``ObservationDelay(ExecutionDelay(env, ...), ...)``, the only order:
    actions are delayed on their way to the env, observations on their way back) the executed action is the
    one it executed. The delay process draws from the wrapper's own generator, seeded by ``reset(seed=...)``
    apart from an :class:`ExecutionDelay`'s, so the two delays follow different paths.

    :param env: the environment whose observations are delayed.
    :param delay: an ``int`` (constant delay) or a delay process, as for :class:`ExecutionDelay`.

    >>> env = ObservationDelay(gym.make("CartPole-v1"), delay=2)
    >>> obs, info = env.reset(seed=0)
    >>> info["obs_delay"], info["arrived"]
    (0, [])
    >>> obs, reward, terminated, truncated, info = env.step(1)
    >>> info["obs_delay"], reward, info["unobserved_actions"].tolist()
    (1, 0.0, [1, 0])
    """

    def __init__(self, env: gym.Env, delay: int | DelayProcess) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, delay=delay)
        gym.Wrapper.__init__(self, env)
        if _shows_pending_actions(env):
            raise ValueError(
                "ObservationDelay cannot wrap a PendingActionsObservation: the view shows what the delays hide; "
                "wrap as PendingActionsObservation(ObservationDelay(env, delay))"
            )
        self.delay_process, self.max_delay = _as_delay_process(delay)
        self._execution_delay = find_wrapper(env, ExecutionDelay)
        self._action_dtype, self._action_shape = _action_layout(env.action_space, "ObservationDelay")
        self.delay_rng = np.random.default_rng()
        self._unseen: deque[Arrival] = deque()  # the steps s_t+1 .. t
        self._shown: Any = None
        self._unobserved = np.zeros((0, *self._action_shape), dtype=self._action_dtype)

    def unobserved_actions(self) -> np.ndarray:
        """The actions executed since the step of the shown observation, oldest first (``obs_delay`` rows)."""
        return self._unobserved

    def _report(self, info: dict[str, Any], arrived: list[Arrival]) -> None:
        actions = [action for _, _, action in self._unseen]
        self._unobserved = np.array(actions, dtype=self._action_dtype).reshape(len(actions), *self._action_shape)
        info["obs_delay"] = len(self._unseen)
        info["unobserved_actions"] = _padded(self._unobserved, self.max_delay)
        info["arrived"] = arrived

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:  # a spawn key of its own: not the path of an ExecutionDelay seeded alike
            self.delay_rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x0B5DE1A7,)))
        observation, info = self.env.reset(seed=seed, options=options)
        # the process restarts; its first delay is checked like every other, and not used (s_0 = 0)
        _checked_delay(self.delay_process.reset(self.delay_rng), self.delay_process, self.max_delay)
        self._unseen.clear()
        self._shown = _snapshot(observation)
        self._report(info, [])
        return self._show(), info

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._execution_delay is None:
            action = _check_action(self.env.action_space, self._action_shape, self._action_dtype, action, "action")
        observation, reward, terminated, truncated, info = self.env.step(action)
        executed = action if self._execution_delay is None else info["executed_action"]
        # a copy now: an env may write its next observations into the same buffers
        self._unseen.append((_snapshot(observation), float(reward), executed))
        delay = _checked_delay(self.delay_process.step(self.delay_rng), self.delay_process, self.max_delay)
        still_unseen = 0 if terminated or truncated else min(delay, len(self._unseen))  # t - s_t
        arrived = [self._unseen.popleft() for _ in range(len(self._unseen) - still_unseen)]
        if arrived:
            self._shown = arrived[-1][0]
        self._report(info, arrived)
        return self._show(), sum((step_reward for _, step_reward, _ in arrived), 0.0), terminated, truncated, info

    def _show(self) -> Any:
        """A copy of the shown observation: it may be shown again, and what a user is given is theirs to change."""
        return _snapshot(self._shown)


def _snapshot(observation: Any) -> Any:
    """A copy of ``observation`` that no later write to the env's buffers can change: arrays are copied (the
    cheapest way), and so are the arrays inside dicts and tuples; anything else is deep-copied."""
    if isinstance(observation, np.ndarray):
        return observation.copy()
    if isinstance(observation, (int, float, bool, np.generic)):
        return observation
    if isinstance(observation, dict):
        return type(observation)((key, _snapshot(value)) for key, value in observation.items())
    if type(observation) is tuple:
        return tuple(_snapshot(value) for value in observation)
    return copy.deepcopy(observation)


def _shows_pending_actions(env: gym.Env) -> bool:
    """Whether a wrapper of ``env`` shows the agent the pending actions (``PendingActionsObservation``, which
    builds on this module and says so with ``shows_pending_actions``)."""
    while isinstance(env, gym.Wrapper):
        if getattr(type(env), "shows_pending_actions", False):
            return True
        env = env.env
    return False


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
