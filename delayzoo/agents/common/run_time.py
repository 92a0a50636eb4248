"""The first update's time in each ``learn`` call, the projected length of the run, and a warning before a
CPU run of days (a paper-size update takes seconds to a minute on a CPU, 100k of them weeks)."""

from __future__ import annotations

import warnings

import torch
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import TrainFrequencyUnit

__all__ = ["LARGE_MODEL_PARAMETERS", "LONG_RUN_SECONDS", "duration", "report_first_update"]

LONG_RUN_SECONDS = 600.0
"""A learn() call of a large model projected to take longer than this on a CPU warns after its first update."""

LARGE_MODEL_PARAMETERS = 1_000_000
"""Models from this size up count as large (PWM's paper world model has 14.6 M parameters, its CartPole entry
0.1 M; DelayedEZ's Atari network 8.4 M)."""


def duration(seconds: float) -> str:
    """``3.2 days``, ``5.0 h``, ``12 min`` or ``40 s``."""
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.0f} s"


def report_first_update(
    model: OffPolicyAlgorithm, wall: float, cpu: float, parameters: int, advice: str, later_updates: int = 0
) -> None:
    """The seconds of one update and the projected time of the remaining ones, for ``model``'s current ``learn``.

    Logged as ``time/seconds_per_update`` and printed with ``verbose >= 1``; a warning, whatever ``verbose``,
    for a model of at least :data:`LARGE_MODEL_PARAMETERS` on a CPU when the projection exceeds
    :data:`LONG_RUN_SECONDS`.

    :param wall: wall seconds of one update
    :param cpu: process CPU seconds of one update
    :param parameters: the model's trainable size
    :param advice: the warning's last sentence (what to do instead)
    :param later_updates: updates still due after the last env step (DelayedEZ's ``final_updates``)
    """
    name = type(model).__name__
    remaining_steps = max(model._total_timesteps - model.num_timesteps, 0)
    message = (
        f"{name}: one update took {wall:.2f} s ({cpu:.2f} s process CPU, {torch.get_num_threads()} torch threads)"
    )
    projected = None
    if model.train_freq.unit == TrainFrequencyUnit.STEP and model.gradient_steps > 0:
        updates = remaining_steps * model.gradient_steps / (model.train_freq.frequency * model.n_envs)
        updates += later_updates
        projected = updates * wall
        after = f" ({later_updates:,} of them after the last step)" if later_updates else ""
        message += (
            f"; about {updates:,.0f} more for the requested {model._total_timesteps:,} steps{after}: "
            f"{duration(projected)} at this rate"
        )
    model.logger.record("time/seconds_per_update", wall)
    large = parameters >= LARGE_MODEL_PARAMETERS
    if model.device.type == "cpu" and large and projected is not None and projected > LONG_RUN_SECONDS:
        warnings.warn(f"{message}. {advice}", stacklevel=3)
    elif model.verbose >= 1:
        print(message)
