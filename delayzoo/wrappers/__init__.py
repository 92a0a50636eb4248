"""Gymnasium wrappers: execution and observation delays, the pending-action view, life loss and env factories.

The wrappers need only Gymnasium and NumPy. The factories and the monitor are loaded when first used
(``from delayzoo.wrappers import make_atari`` imports ``ale_py``, ``make_minatar`` the optional ``minatar``;
``EpisodeMonitor`` imports Stable-Baselines3, so torch), so that importing the wrappers stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from delayzoo.wrappers.delay import (
    MAX_DELAY,
    ActionQueue,
    ConstantDelay,
    DelayProcess,
    ExecutionDelay,
    IIDDelay,
    ObservationDelay,
    RandomWalkDelay,
    TraceDelay,
    example_trace_path,
)
from delayzoo.wrappers.life import EpisodicLife, LifeLossInfo
from delayzoo.wrappers.pending import PendingActionsObservation, find_execution_delay, find_observation_delay

if TYPE_CHECKING:
    from delayzoo.wrappers.atari import FrameStack, MaxPoolFrameSkip, NoopReset, make_atari
    from delayzoo.wrappers.dmc import ActionRepeat, FlattenProprio, Float32Action, RenderedPixels, make_dmc
    from delayzoo.wrappers.minatar import MinAtarObservation, make_minatar, register_minatar_envs
    from delayzoo.wrappers.monitor import EpisodeMonitor

_LAZY = {
    "FrameStack": "atari",
    "MaxPoolFrameSkip": "atari",
    "NoopReset": "atari",
    "make_atari": "atari",
    "ActionRepeat": "dmc",
    "FlattenProprio": "dmc",
    "Float32Action": "dmc",
    "RenderedPixels": "dmc",
    "make_dmc": "dmc",
    "MinAtarObservation": "minatar",
    "make_minatar": "minatar",
    "register_minatar_envs": "minatar",
    "EpisodeMonitor": "monitor",
}
"""Public names loaded on first use, and their module."""

__all__ = [
    "MAX_DELAY",
    "ActionQueue",
    "ActionRepeat",
    "ConstantDelay",
    "DelayProcess",
    "EpisodeMonitor",
    "EpisodicLife",
    "ExecutionDelay",
    "FlattenProprio",
    "FrameStack",
    "Float32Action",
    "IIDDelay",
    "LifeLossInfo",
    "MaxPoolFrameSkip",
    "MinAtarObservation",
    "NoopReset",
    "ObservationDelay",
    "PendingActionsObservation",
    "RandomWalkDelay",
    "RenderedPixels",
    "TraceDelay",
    "example_trace_path",
    "find_execution_delay",
    "find_observation_delay",
    "make_atari",
    "make_dmc",
    "make_minatar",
    "register_minatar_envs",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
