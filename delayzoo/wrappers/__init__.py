"""Gymnasium wrappers: execution delays, the pending-action view, life loss and env factories."""

from delayzoo.wrappers.delay import (
    ActionQueue,
    ConstantDelay,
    DelayProcess,
    ExecutionDelay,
    IIDDelay,
    RandomWalkDelay,
)
from delayzoo.wrappers.pending import PendingActionsObservation, find_execution_delay

__all__ = [
    "ActionQueue",
    "ConstantDelay",
    "DelayProcess",
    "ExecutionDelay",
    "IIDDelay",
    "PendingActionsObservation",
    "RandomWalkDelay",
    "find_execution_delay",
]
