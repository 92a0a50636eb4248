"""The ``env_wrapper`` entries by which a zoo run tells rl_zoo3's own ``enjoy`` and ``record_video``, which
replay it from its ``config.yml``, to rebuild its delays, or to refuse.

rl_zoo3's tools make a run's env as ``gym.make(env id, **env_kwargs)`` -> ``Monitor`` -> the wrappers
listed under ``env_wrapper`` in ``config.yml``. The zoo writes one more entry first in that list
(:func:`replay_entry`):

- plain Gymnasium envs under a delay: :func:`replay_zoo_stack` with the run's delay settings, which
  puts the same :class:`~delayzoo.wrappers.ExecutionDelay`, :class:`~delayzoo.wrappers.ObservationDelay`
  and pending view over the env (each as the run had it), so the agent plays under the delays it was
  trained with instead of none;
- ALE and ``dm_control/`` envs, made by delayzoo's factories (frame skip, resizing, action repeat,
  life loss...) that these tools do not rebuild: :data:`FACTORY_ENV`, a name whose look-up raises a
  ``ValueError`` saying to use ``python -m delayzoo.zoo.enjoy``, before any env is made;
- normalised runs (``normalize``), whose statistics the zoo saves as plain arrays (``vecnormalize.npz``)
  that these tools do not read (they would play unnormalised): :data:`NORMALIZED_RUN`, refused the same way.

The zoo's own ``eval``, ``enjoy`` and ``record_video`` rebuild the env from ``args.yml`` and skip
these entries (:meth:`delayzoo.zoo.runs.Run.env_wrappers`).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from delayzoo.zoo.delay_settings import DelaySettings
from delayzoo.zoo.envs import add_delay

__all__ = [
    "FACTORY_ENV",
    "FORMER_MODULE",
    "NORMALIZED_RUN",
    "REPLAY_STACK",
    "is_replay_entry",
    "replay_entry",
    "replay_zoo_stack",
]

REPLAY_STACK = f"{__name__}.replay_zoo_stack"
"""The ``env_wrapper`` name of :func:`replay_zoo_stack`."""
FACTORY_ENV = f"{__name__}.factory_env"
"""The ``env_wrapper`` name written for ALE and DeepMind Control runs: looking it up raises."""
NORMALIZED_RUN = f"{__name__}.normalized_run"
"""The ``env_wrapper`` name written for normalised runs: looking it up raises."""
_USE_OURS = (
    "; replay the run with python -m delayzoo.zoo.enjoy (or delayzoo.zoo.record_video, delayzoo.zoo.eval), "
    "which take the same flags"
)
_REFUSALS = {
    FACTORY_ENV: "this zoo run's env was made by delayzoo's make_atari / make_dmc / make_minatar (with its execution "
    "delay), "
    "which this tool does not rebuild" + _USE_OURS,
    NORMALIZED_RUN: "this zoo run's observations were normalised with statistics saved as plain arrays "
    "(vecnormalize.npz), which this tool does not read: it would play unnormalised" + _USE_OURS,
}


def replay_zoo_stack(env: gym.Env, **delay: Any) -> gym.Env:
    """Put a zoo run's delays over the env a replay tool made (``Monitor(gym.make(env id))``).

    :param env: the env the tool made
    :param delay: the run's :class:`~delayzoo.zoo.delay_settings.DelaySettings` fields (``delay``, ``process``, ...)
    :return: the env under the run's delay wrappers
    """
    return add_delay(env, DelaySettings.from_dict(delay, "the env_wrapper entry of the run's config.yml"))


def replay_entry(kind: str, delay: DelaySettings, normalized: bool = False) -> dict[str, Any] | None:
    """The ``env_wrapper`` entry a run's ``config.yml`` lists first, or ``None`` when none is needed.

    :param kind: the run's :func:`~delayzoo.zoo.envs.env_kind`
    :param delay: the run's delay settings
    :param normalized: the run normalises observations or rewards (``normalize``)
    """
    if kind != "gym":
        return {FACTORY_ENV: {"kind": kind}}
    if normalized:
        return {NORMALIZED_RUN: {}}
    if not delay.delayed:
        return None
    return {REPLAY_STACK: delay.to_record()}


FORMER_MODULE = "delayzoo.zoo.replay"
"""Where these entries were written from before this module had its name (runs of earlier versions name it)."""


def is_replay_entry(wrapper: Any) -> bool:
    """Whether an ``env_wrapper`` entry is one the zoo wrote (see the module docstring), now or under
    :data:`FORMER_MODULE`."""
    name = next(iter(wrapper)) if isinstance(wrapper, dict) and len(wrapper) == 1 else wrapper
    if isinstance(name, str) and name.startswith(FORMER_MODULE + "."):
        name = __name__ + name.removeprefix(FORMER_MODULE)
    return name in (REPLAY_STACK, *_REFUSALS)


def __getattr__(name: str) -> Any:
    refusal = _REFUSALS.get(f"{__name__}.{name}")
    if refusal is not None:
        raise ValueError(refusal)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
