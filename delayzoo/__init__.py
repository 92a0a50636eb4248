"""delayzoo: reinforcement learning under stochastic execution delays."""

from delayzoo.agents.delayed_ez import DelayedEZ
from delayzoo.agents.pwm import PWM
from delayzoo.version import __version__
from delayzoo.wrappers import (
    ConstantDelay,
    ExecutionDelay,
    IIDDelay,
    PendingActionsObservation,
    RandomWalkDelay,
)

__all__ = [
    "ConstantDelay",
    "DelayedEZ",
    "ExecutionDelay",
    "IIDDelay",
    "PWM",
    "PendingActionsObservation",
    "RandomWalkDelay",
    "__version__",
]
