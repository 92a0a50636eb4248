"""Environments of the zoo: env-id checks and the env factory used by train, eval, enjoy and random play (the
delay settings are :mod:`delayzoo.zoo.delay_settings`).

Every env id goes through :func:`make_zoo_env`, which puts the episode statistics at the base and the
delay on top, whatever the kind of env:

- ALE ids (``ALE/Pong-v5``): :func:`~delayzoo.wrappers.atari.make_atari`;
- DeepMind Control ids (``dm_control/walker-walk-v0``): :func:`~delayzoo.wrappers.dmc.make_dmc`;
- MinAtar ids (``MinAtar/Breakout-v1``, the extra ``delayzoo[minatar]``):
  :func:`~delayzoo.wrappers.minatar.make_minatar` (float channels-first frames);
- any other Gymnasium id: ``gym.make`` -> :class:`~delayzoo.wrappers.monitor.EpisodeMonitor` ->
  :class:`~delayzoo.wrappers.ExecutionDelay`.

On top of each, :class:`~delayzoo.wrappers.ObservationDelay` (with an observation delay) and
:class:`~delayzoo.wrappers.PendingActionsObservation` (with the view).
"""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation
from delayzoo.wrappers.atari import make_atari
from delayzoo.wrappers.dmc import make_dmc, register_dmc_envs
from delayzoo.wrappers.minatar import is_minatar_id, make_minatar, register_minatar_envs
from delayzoo.wrappers.monitor import add_episode_monitor
from delayzoo.zoo.delay_settings import DelaySettings
from delayzoo.zoo.errors import ZooError

__all__ = [
    "add_delay",
    "check_env_id",
    "env_kind",
    "import_gym_packages",
    "make_zoo_env",
]

def env_kind(env_id: str | EnvSpec) -> str:
    """``"atari"`` for ALE ids, ``"dmc"`` for ``dm_control/...`` ids, ``"minatar"`` for ``MinAtar/...``
    ids, ``"gym"`` otherwise (ids or specs)."""
    name = env_id.id if isinstance(env_id, EnvSpec) else env_id
    if name.startswith("dm_control/"):
        return "dmc"
    if is_minatar_id(name):
        return "minatar"
    entry_point = (env_id if isinstance(env_id, EnvSpec) else gym.spec(env_id)).entry_point
    if isinstance(entry_point, str):
        return "atari" if entry_point.startswith("ale_py") else "gym"
    return "atari" if getattr(entry_point, "__module__", "").startswith("ale_py") else "gym"


def check_env_id(env_id: str) -> None:
    """Raise :class:`ZooError` with the closest registered ids when ``env_id`` is not registered."""
    if env_id in gym.registry:
        return
    if is_minatar_id(env_id):
        try:
            register_minatar_envs()
        except ImportError as error:
            raise ZooError(str(error)) from None
        if env_id in gym.registry:
            return
    register_dmc_envs()  # dm_control/ ids, and close matches among them
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(name) for name in close)}?" if close else ""
    raise ZooError(f"unknown env {env_id!r}: not in the Gymnasium registry{hint}")


def import_gym_packages(names: Sequence[str]) -> None:
    """Import the modules named by ``--gym-packages`` (they register their env ids), as rl_zoo3 does.

    :raise ZooError: naming the module that fails to import
    """
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ZooError(f"--gym-packages {name}: cannot import it ({error})") from error


def make_zoo_env(
    env_id: str | EnvSpec,
    delay: DelaySettings | None = None,
    monitor_file: str | None = None,
    pixels: bool = False,
    monitor_kwargs: dict[str, Any] | None = None,
    **env_kwargs: Any,
) -> gym.Env:
    """Make one env of the zoo: the factory for ``env_id``'s kind, statistics at the base, delay on top.

    :param env_id: a registered Gymnasium id (ALE and ``dm_control/`` ids included), or the ``EnvSpec``
        of one (a subprocess can make an env registered only in its parent from the parent's spec)
    :param delay: the delays (``None`` or ``DelaySettings()``: none)
    :param monitor_file: CSV file of the ``EpisodeMonitor`` (``.monitor.csv`` is appended); ``None``: no file
    :param pixels: render DeepMind Control tasks as images (``obs="pixels"``)
    :param monitor_kwargs: more ``EpisodeMonitor`` keywords (rl_zoo3's ``monitor_kwargs``: ``info_keywords``, ...)
    :param env_kwargs: passed to the factory (``make_atari`` / ``make_dmc`` / ``make_minatar``) or to ``gym.make``
    :return: the wrapped environment
    """
    settings = (delay or DelaySettings()).resolved()
    kind = env_kind(env_id)
    monitor = {**(monitor_kwargs or {}), "filename": monitor_file}
    name = env_id.id if isinstance(env_id, EnvSpec) else env_id  # the factories look ALE and dm_control ids up
    if pixels and kind != "dmc":
        raise ZooError(f"--pixels applies to dm_control/ ids, not to {name!r}")
    if kind in ("atari", "dmc", "minatar"):
        # the factory puts the execution delay where its kind needs it; the rest goes on top, as for any env
        factory_kwargs: dict[str, Any] = dict(
            delay=settings.make_process(), init_action=settings.init_action, monitor=monitor
        )
        if pixels:
            factory_kwargs["obs"] = "pixels"
        factories: dict[str, Callable[..., gym.Env]] = {"atari": make_atari, "minatar": make_minatar, "dmc": make_dmc}
        return _observe(factories[kind](name, **factory_kwargs, **env_kwargs), settings)
    env: gym.Env = gym.make(env_id, **env_kwargs)
    return add_delay(add_episode_monitor(env, monitor), settings)


def add_delay(env: gym.Env, settings: DelaySettings) -> gym.Env:
    """``env`` under the delays ``settings`` describe: ``ObservationDelay(ExecutionDelay(env))``, then the
    pending view (each when asked for)."""
    process = settings.make_process()
    if process is not None:
        env = ExecutionDelay(env, process, init_action=settings.init_action)
    return _observe(env, settings)


def _observe(env: gym.Env, settings: DelaySettings) -> gym.Env:
    """``env`` (under its execution delay, if any) under the observation delay and the pending view of ``settings``."""
    process = settings.observation.make_process()
    if process is not None:
        env = ObservationDelay(env, process)
    return PendingActionsObservation(env) if settings.pending_view else env
