"""Checks shared by the agents: hyperparameter ranges at construction, finite data at every step.

A bad hyperparameter is refused in the constructor with a ``ValueError`` (``TypeError`` for a value
of the wrong type) that names it, the value and the valid range, instead of training silently or
failing deep inside torch. A non-finite reward or observation is refused when the env returns it,
before the replay buffer (and so any update) sees it, and a non-finite observation given to ``predict``
is refused before the network sees it (it would otherwise look like a diverged network). A CUDA device
torch cannot use is refused where it is chosen (agents, ``load``, the zoo's and the benchmarks' ``--device``),
where SB3 would train on the CPU without a word.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from delayzoo.checks import check_number

__all__ = [
    "check_device",
    "check_finite_observation",
    "check_finite_step",
    "check_gradient_steps",
    "check_learning_rate",
    "check_number",
    "check_train_freq",
    "device_argument",
    "warn_if_no_update",
]


def check_learning_rate(value: float | Callable[[float], float]) -> None:
    """A learning rate (or a schedule, checked at its start) must be a finite number > 0."""
    start = value(1.0) if callable(value) else value
    name = "learning_rate" if not callable(value) else "learning_rate(1.0) of the schedule"
    check_number(name, start, 0, low_open=True)


def check_train_freq(value: Any) -> None:
    """``train_freq``: an integer >= 1, or SB3's ``(n, "step")`` / ``(n, "episode")`` with n >= 1."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2 or value[1] not in ("step", "episode"):
            raise ValueError(f"train_freq must be an integer or (n, 'step') / (n, 'episode'), got {value!r}")
        check_number("train_freq", value[0], 1, integer=True)
    elif hasattr(value, "frequency") and hasattr(value, "unit"):  # SB3's TrainFreq, as a loaded model has it
        check_number("train_freq", value.frequency, 1, integer=True)
    else:
        check_number("train_freq", value, 1, integer=True)


def check_gradient_steps(value: Any) -> None:
    """``gradient_steps``: an integer >= 0, or -1 (SB3's meaning: as many updates as env steps collected)."""
    check_number("gradient_steps", value, -1, integer=True)


def warn_if_no_update(learning_starts: int, total_timesteps: int) -> None:
    """Warn when a run ends before the first update (``learning_starts >= total_timesteps``)."""
    if learning_starts >= total_timesteps:
        warnings.warn(
            f"learning_starts={learning_starts} >= total_timesteps={total_timesteps}: this run collects "
            "random steps only and makes no update",
            UserWarning,
            stacklevel=3,
        )


def check_device(device: torch.device | str, name: str = "device") -> None:
    """Refuse a CUDA device that torch cannot use (SB3 would fall back to the CPU silently); ``"auto"`` passes.

    :param device: the device asked for: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:N"``, a ``torch.device``...
    :param name: where it was given, for the message: a keyword (``"device"``) or a flag (``"--device"``)
    :raise ValueError: for a string that is not a device, for ``cuda`` without a CUDA device, and for
        ``cuda:N`` beyond the devices torch sees; the message says how to choose the CPU
    """
    if isinstance(device, str) and device == "auto":
        return
    flag, shown = name.startswith("-"), device if isinstance(device, str) else str(device)
    given = f"{name} {shown}" if flag else f"{name}={shown!r}"
    cpu = f"{name} cpu" if flag else f"{name}='cpu'"
    try:
        cuda = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"{given} is not a torch device: use 'auto', 'cpu', 'cuda' or 'cuda:N'") from None
    if cuda.type != "cuda":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count > (cuda.index or 0):
        return
    if count == 0:
        seen = "no CUDA device" + (" (this torch is a CPU-only build)" if torch.version.cuda is None else "")
    else:
        seen = f"{count} CUDA device(s), cuda:0 to cuda:{count - 1}"
    raise ValueError(f"{given} asks for a CUDA GPU, but torch sees {seen}; choose the CPU with {cpu}")


def device_argument(value: str) -> str:
    """``argparse`` type of a ``--device`` flag: the value, refused as :func:`check_device` refuses it."""
    try:
        check_device(value, "--device")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return value


def _nonfinite_envs(array: Any, n_envs: int) -> np.ndarray:
    values = np.asarray(array)
    if not np.issubdtype(values.dtype, np.floating):
        return np.zeros(n_envs, dtype=bool)
    return ~np.isfinite(values.reshape(n_envs, -1)).all(axis=1)


def check_finite_step(step: int, observations: Any, rewards: Any = None, infos: Any = None) -> None:
    """Raise a ``ValueError`` naming the step and the env index at the first non-finite reward or observation.

    :param step: the env step counter (``num_timesteps``) the data belongs to
    :param observations: the batched observations (an array, or a dict of arrays)
    :param rewards: the batched rewards (``None`` on reset)
    :param infos: the infos of the step; their ``terminal_observation`` entries are checked too
    """
    parts = observations.items() if isinstance(observations, dict) else [(None, observations)]
    n_envs = len(next(iter(observations.values())) if isinstance(observations, dict) else observations)
    if rewards is not None:
        bad = _nonfinite_envs(np.asarray(rewards, dtype=np.float64), n_envs)
        if bad.any():
            env = int(np.argmax(bad))
            raise ValueError(
                f"non-finite reward {float(np.asarray(rewards).reshape(n_envs)[env])} at step {step} in env {env}; "
                "the env must return finite rewards"
            )
    for key, array in parts:
        bad = _nonfinite_envs(array, n_envs)
        if bad.any():
            env = int(np.argmax(bad))
            where = "" if key is None else f" (key {key!r})"
            raise ValueError(
                f"non-finite observation{where} at step {step} in env {env}; the env must return finite observations"
            )
    for env, info in enumerate(infos or []):
        final = info.get("terminal_observation")
        if final is None:
            continue
        finals = final.items() if isinstance(final, dict) else [(None, final)]
        for key, array in finals:
            if _nonfinite_envs(np.asarray(array)[None], 1).any():
                where = "" if key is None else f" (key {key!r})"
                raise ValueError(
                    f"non-finite terminal observation{where} at step {step} in env {env}; "
                    "the env must return finite observations"
                )


def check_finite_observation(observation: Any, where: str = "predict") -> None:
    """Raise a ``ValueError`` naming the first non-finite entry (index, and key of a ``Dict`` observation).

    :param observation: an observation or a batch of them (an array, or a dict of arrays), as given
    :param where: what received it, for the message
    """
    parts = observation.items() if isinstance(observation, dict) else [(None, observation)]
    for key, array in parts:
        values = np.asarray(array)
        if not np.issubdtype(values.dtype, np.floating) or np.isfinite(values).all():
            continue
        index = tuple(int(i) for i in np.argwhere(~np.isfinite(values))[0])
        where_key = "" if key is None else f" of key {key!r}"
        raise ValueError(
            f"non-finite observation passed to {where}: entry {list(index)}{where_key} (shape {values.shape}) is "
            f"{values[index]}; observations must be finite"
        )
