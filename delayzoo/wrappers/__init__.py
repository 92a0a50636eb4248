"""Gymnasium wrappers: execution delays, the pending-action view, life loss and env factories."""

from delayzoo.wrappers.atari import FrameStack, MaxPoolFrameSkip, NoopReset, make_atari
from delayzoo.wrappers.delay import (
    ActionQueue,
    ConstantDelay,
    DelayProcess,
    ExecutionDelay,
    IIDDelay,
    RandomWalkDelay,
)
from delayzoo.wrappers.dmc import ActionRepeat, FlattenProprio, Float32Action, RenderedPixels, make_dmc
from delayzoo.wrappers.life import EpisodicLife, LifeLossInfo
from delayzoo.wrappers.monitor import EpisodeMonitor
from delayzoo.wrappers.pending import PendingActionsObservation, find_execution_delay

__all__ = [
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
    "NoopReset",
    "PendingActionsObservation",
    "RandomWalkDelay",
    "RenderedPixels",
    "find_execution_delay",
    "make_atari",
    "make_dmc",
]
