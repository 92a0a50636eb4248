"""delayzoo: reinforcement learning under stochastic execution and observation delays.

The agents (``PWM``, ``DelayedEZ``) are loaded on first use, so that ``import delayzoo.wrappers``
needs neither torch nor Stable-Baselines3.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from delayzoo.version import __version__
from delayzoo.wrappers import (
    ConstantDelay,
    ExecutionDelay,
    IIDDelay,
    ObservationDelay,
    PendingActionsObservation,
    RandomWalkDelay,
    TraceDelay,
)

if TYPE_CHECKING:
    from delayzoo.agents.delayed_ez import DelayedEZ
    from delayzoo.agents.pwm import PWM

_AGENTS = {"PWM": "delayzoo.agents.pwm", "DelayedEZ": "delayzoo.agents.delayed_ez"}
"""The agents, loaded on first use, and their package."""

__all__ = [
    "ConstantDelay",
    "DelayedEZ",
    "ExecutionDelay",
    "IIDDelay",
    "ObservationDelay",
    "PWM",
    "PendingActionsObservation",
    "RandomWalkDelay",
    "TraceDelay",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in _AGENTS:
        value = getattr(importlib.import_module(_AGENTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
