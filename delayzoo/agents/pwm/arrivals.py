"""The undelayed trajectory of an env under an ``ObservationDelay``, rebuilt from ``info["arrived"]``
as replay rows that the world model can learn from.

Each agent step delivers the env steps that arrived, ``(observation, reward, executed action)`` in step
order (zero, one or several; :class:`~delayzoo.wrappers.ObservationDelay`). Every arrival makes one row
``(previous arrived observation, its executed action, its reward, done)``: the step the world model
learns, as under an execution delay. Envs of a vector env deliver different numbers of rows per step,
while the replay buffer writes one row of every env at a time, so each env's rows wait in a queue and
leave together: a row reaches the buffer at most ``max_obs_delay`` steps late.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NamedTuple

import numpy as np


class ArrivalRow(NamedTuple):
    """One env step as the replay stores it."""

    observation: Any
    action: Any
    reward: float
    done: bool
    truncated: bool


class ArrivalRows:
    """Per-env queues of replay rows built from ``info["arrived"]`` (see the module docstring).

    :param n_envs: number of envs of the vector env
    """

    def __init__(self, n_envs: int) -> None:
        self.queues: list[deque[ArrivalRow]] = [deque() for _ in range(n_envs)]
        self.previous: list[Any] = [None] * n_envs

    def restart(self, observations: list[Any]) -> None:
        """Start every env from the shown (reset) observations; rows not yet written are dropped."""
        for queue in self.queues:
            queue.clear()
        self.previous = list(observations)

    def add(self, infos: list[dict[str, Any]], dones: np.ndarray, reset_observations: list[Any]) -> None:
        """Queue the rows of one agent step of every env.

        :param infos: the step's infos, each with ``"arrived"``
        :param dones: the step's episode ends (an ended episode's last arrival is its final step)
        :param reset_observations: each env's observation after the step (the next episode's first where done)
        :raise ValueError: naming the env whose info has no ``"arrived"``
        """
        for index, info in enumerate(infos):
            if "arrived" not in info:
                raise ValueError(
                    f"env {index} gave no info['arrived']: forecast mode under an observation delay learns from the "
                    "steps an ObservationDelay delivers"
                )
            arrived = info["arrived"]
            for position, (observation, reward, action) in enumerate(arrived):
                last = position == len(arrived) - 1
                done = bool(dones[index]) and last
                truncated = done and bool(info.get("TimeLimit.truncated", False))
                self.queues[index].append(ArrivalRow(self.previous[index], action, reward, done, truncated))
                self.previous[index] = observation
            if dones[index]:
                self.previous[index] = reset_observations[index]

    def pop(self) -> list[ArrivalRow] | None:
        """One row of every env, oldest first, when every env has one; else ``None``."""
        if not all(self.queues):
            return None
        return [queue.popleft() for queue in self.queues]
