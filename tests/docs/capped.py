"""The documentation examples' budget: every Stable-Baselines3 ``learn`` capped at a few steps.

The examples in the README and the docs train for real budgets (``learn(50_000)``, ``-n 8000``); the
tests run them as they are written, with each ``learn`` call cut to ``$DELAYZOO_EXAMPLE_STEPS`` env
steps (default 300), so that they check the API and the flags, not the learning. The cap sits in
``BaseAlgorithm._setup_learn``, which every SB3 algorithm and both delayzoo agents go through, so it
also caps the zoo's ``-n``. Shell commands run under it through this file, as ``python -m`` would run
them::

    DELAYZOO_EXAMPLE_STEPS=2000 python tests/docs/capped.py -m delayzoo.zoo.train --algo pwm ...
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
from collections.abc import Iterator
from typing import Any

STEPS_VARIABLE = "DELAYZOO_EXAMPLE_STEPS"
DEFAULT_STEPS = 300


def example_steps() -> int:
    """The cap: ``$DELAYZOO_EXAMPLE_STEPS``, or 300 env steps."""
    value = os.environ.get(STEPS_VARIABLE, str(DEFAULT_STEPS))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{STEPS_VARIABLE} must be a positive integer, got {value!r}")
    return int(value)


@contextlib.contextmanager
def capped_learning(max_steps: int) -> Iterator[None]:
    """Within the block, every ``learn(total_timesteps)`` trains at most ``max_steps`` env steps."""
    from stable_baselines3.common.base_class import BaseAlgorithm

    original = BaseAlgorithm._setup_learn

    def setup_learn(self: BaseAlgorithm, total_timesteps: int, *args: Any, **kwargs: Any) -> Any:
        return original(self, min(int(total_timesteps), max_steps), *args, **kwargs)

    BaseAlgorithm._setup_learn = setup_learn  # type: ignore[method-assign]
    try:
        yield
    finally:
        BaseAlgorithm._setup_learn = original  # type: ignore[method-assign]


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "-m":
        sys.exit("usage: python tests/docs/capped.py -m MODULE [ARGS...]")
    module = sys.argv[2]
    sys.argv = [module, *sys.argv[3:]]
    with capped_learning(example_steps()):
        runpy.run_module(module, run_name="__main__", alter_sys=True)
