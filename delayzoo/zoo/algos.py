"""The algorithm table of the zoo: rl_zoo3's ``ALGOS`` plus our agents, imported only when asked for.

Our agents are registered in :data:`rl_zoo3.utils.ALGOS` (the dict rl_zoo3's train, enjoy and
experiment manager all read) by :func:`load_algorithm`, so a failing agent module never stops the zoo
from running the Stable-Baselines3 algorithms.
"""

from __future__ import annotations

import difflib
import importlib

from rl_zoo3.utils import ALGOS
from stable_baselines3.common.base_class import BaseAlgorithm

from delayzoo.zoo.errors import ZooError

__all__ = ["OUR_ALGOS", "algorithm_names", "load_algorithm"]

OUR_ALGOS: dict[str, str] = {
    "pwm": "delayzoo.agents.pwm.pwm:PWM",
    "delayed_ez": "delayzoo.agents.delayed_ez.delayed_ez:DelayedEZ",
}
"""Our agents: zoo name -> ``"module:Class"``."""


def algorithm_names() -> list[str]:
    """Every algorithm name the zoo accepts, sorted."""
    return sorted(set(ALGOS) | set(OUR_ALGOS))


def load_algorithm(name: str) -> type[BaseAlgorithm]:
    """The algorithm class of ``name``; our agents are imported and registered in rl_zoo3's table.

    :param name: ``"ppo"``, ``"dqn"``, ..., ``"pwm"``, ``"delayed_ez"``
    :raise ZooError: for an unknown name (with the closest names) or an agent module that fails to import
    """
    if name in OUR_ALGOS:
        module_name, class_name = OUR_ALGOS[name].split(":")
        try:
            algorithm = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError) as error:
            raise ZooError(
                f"algorithm {name!r} is not available: importing {OUR_ALGOS[name]} failed ({error})"
            ) from error
        ALGOS[name] = algorithm
        return algorithm
    if name in ALGOS:
        return ALGOS[name]
    close = difflib.get_close_matches(name, algorithm_names(), n=3, cutoff=0.5)
    hint = f"; did you mean {' or '.join(repr(other) for other in close)}?" if close else ""
    raise ZooError(f"unknown algorithm {name!r}{hint} (known: {', '.join(algorithm_names())})")
