"""Environments of the zoo: delay settings, env-id checks and the env factory used by train and eval.

Every env id goes through :func:`make_zoo_env`, which puts the episode statistics at the base and the
delay on top, whatever the kind of env:

- ALE ids (``ALE/Pong-v5``): :func:`~delayzoo.wrappers.atari.make_atari`;
- DeepMind Control ids (``dm_control/walker-walk-v0``): :func:`~delayzoo.wrappers.dmc.make_dmc`;
- MinAtar ids (``MinAtar/Breakout-v1``, the extra ``delayzoo[minatar]``):
  :func:`~delayzoo.wrappers.minatar.make_minatar` (float channels-first frames);
- any other Gymnasium id: ``gym.make`` -> :class:`~delayzoo.wrappers.monitor.EpisodeMonitor` ->
  :class:`~delayzoo.wrappers.ExecutionDelay` -> :class:`~delayzoo.wrappers.PendingActionsObservation`.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
from collections.abc import Sequence
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from delayzoo.wrappers import ConstantDelay, ExecutionDelay, IIDDelay, PendingActionsObservation, RandomWalkDelay
from delayzoo.wrappers.atari import make_atari
from delayzoo.wrappers.dmc import make_dmc, register_dmc_envs
from delayzoo.wrappers.minatar import is_minatar_id, make_minatar, register_minatar_envs
from delayzoo.wrappers.monitor import add_episode_monitor
from delayzoo.zoo.errors import ZooError

__all__ = ["DelaySettings", "add_delay", "check_env_id", "env_kind", "import_gym_packages", "make_zoo_env"]

PROCESSES = ("constant", "random-walk", "iid")
INIT_ACTIONS = ("noop", "random")
DEFAULT_P = 0.2


@dataclasses.dataclass(frozen=True)
class DelaySettings:
    """The execution delay of a run, as the zoo's flags and YAML ``delay:`` entries give it.

    ``delay`` is the largest delay (``None``: no delay wrapper). ``process`` is ``"constant"`` (every
    action waits ``delay`` steps), ``"random-walk"`` (:class:`~delayzoo.wrappers.RandomWalkDelay` between
    ``min_delay`` and ``delay`` with step probability ``p``) or ``"iid"`` (uniform over
    ``min_delay..delay``, drawn independently each step).

    :param delay: the maximum delay in steps, or ``None`` for no delay
    :param process: ``"constant"``, ``"random-walk"`` or ``"iid"``
    :param p: probability of each of -1 and +1 per step (random walk only)
    :param min_delay: the smallest delay (random walk and iid only)
    :param pending_view: give the agent the pending actions (:class:`~delayzoo.wrappers.PendingActionsObservation`)
    :param init_action: queue filler at reset, ``"noop"`` or ``"random"``
    """

    delay: int | None = None
    process: str = "constant"
    p: float | None = None
    min_delay: int | None = None
    pending_view: bool = False
    init_action: str = "noop"

    @classmethod
    def from_dict(cls, entries: dict[str, Any], source: str) -> DelaySettings:
        """Build and check settings from a mapping with the fields' names.

        :param entries: ``{"delay": 5, "process": "random-walk", ...}``; missing fields take their defaults
        :param source: where the entries come from, for error messages (``"--delay flags"``, a YAML key)
        :raise ZooError: on unknown fields or contradictory values
        """
        fields = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(entries) - fields)
        if unknown:
            raise ZooError(f"unknown delay setting(s) {unknown} in {source}; expected some of {sorted(fields)}")
        settings = cls(**{key: value for key, value in entries.items() if value is not None})
        settings.check(source)
        return settings

    def check(self, source: str) -> None:
        """Raise :class:`ZooError` naming the flag when the settings contradict each other."""
        if self.process not in PROCESSES:
            raise ZooError(f"unknown delay process {self.process!r} in {source}; expected one of {list(PROCESSES)}")
        if self.init_action not in INIT_ACTIONS:
            raise ZooError(
                f"unknown init action {self.init_action!r} in {source}; expected one of {list(INIT_ACTIONS)}"
            )
        if self.delay is None:
            given = [
                flag
                for flag, value, default in (
                    ("--delay-process", self.process, "constant"),
                    ("--delay-p", self.p, None),
                    ("--min-delay", self.min_delay, None),
                    ("--pending-view", self.pending_view, False),
                    ("--init-action", self.init_action, "noop"),
                )
                if value != default
            ]
            if given:
                verb = "needs" if len(given) == 1 else "need"
                raise ZooError(f"{', '.join(given)} in {source} {verb} --delay N (the maximum delay)")
            return
        if isinstance(self.delay, bool) or not isinstance(self.delay, int) or self.delay < 0:
            raise ZooError(f"--delay must be an integer >= 0, got {self.delay!r} in {source}")
        if self.process == "constant":
            if self.p is not None:
                raise ZooError(
                    f"--delay-p {self.p} in {source} contradicts a constant delay; add --delay-process random-walk"
                )
            if self.min_delay is not None:
                raise ZooError(
                    f"--min-delay {self.min_delay} in {source} contradicts a constant delay; "
                    "add --delay-process random-walk or iid"
                )
        if self.process == "iid" and self.p is not None:
            raise ZooError(f"--delay-p {self.p} in {source} applies to --delay-process random-walk, not iid")
        if self.min_delay is not None:
            if isinstance(self.min_delay, bool) or not isinstance(self.min_delay, int) or self.min_delay < 0:
                raise ZooError(f"--min-delay must be an integer >= 0, got {self.min_delay!r} in {source}")
            if self.min_delay > self.delay:
                raise ZooError(f"--min-delay {self.min_delay} is above --delay {self.delay} in {source}")
        if self.p is not None and (
            isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0.0 <= self.p <= 0.5
        ):
            raise ZooError(f"--delay-p must be a probability in [0, 0.5], got {self.p!r} in {source}")

    def resolved(self) -> DelaySettings:
        """The same settings with every default written out (what a run records to be repeatable)."""
        if self.delay is None:
            return DelaySettings()
        p = self.p if self.p is not None or self.process != "random-walk" else DEFAULT_P
        min_delay = self.min_delay if self.min_delay is not None or self.process == "constant" else 0
        return dataclasses.replace(self, p=None if p is None else float(p), min_delay=min_delay)

    def merged(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """These settings as a dict, overridden key by key by ``overrides`` (the flags given).

        A different ``process`` in ``overrides`` drops ``p`` and ``min_delay``, which belong to the old one.
        """
        entries = {key: value for key, value in dataclasses.asdict(self).items() if value is not None}
        if "process" in overrides and overrides["process"] != self.process:
            entries.pop("p", None)
            entries.pop("min_delay", None)
        entries.update(overrides)
        return entries

    def make_process(self) -> ConstantDelay | RandomWalkDelay | IIDDelay | None:
        """The delay process these settings describe, or ``None`` without delay."""
        settings = self.resolved()
        if settings.delay is None:
            return None
        if settings.process == "constant":
            return ConstantDelay(settings.delay)
        min_delay = settings.min_delay or 0
        if settings.process == "random-walk":
            p = DEFAULT_P if settings.p is None else settings.p
            return RandomWalkDelay(settings.delay, p=p, min_delay=min_delay)
        return IIDDelay(list(range(min_delay, settings.delay + 1)))

    def to_record(self) -> dict[str, Any]:
        """Plain data for ``args.yml`` / ``config.yml``."""
        return dataclasses.asdict(self.resolved())

    def label(self) -> str:
        """A short description for logs and plots: ``"no delay"``, ``"random-walk delay 0..5 p=0.2 +view"``."""
        settings = self.resolved()
        if settings.delay is None:
            return "no delay"
        if settings.process == "constant":
            text = f"delay={settings.delay}"
        elif settings.process == "random-walk":
            text = f"random-walk delay {settings.min_delay}..{settings.delay} p={settings.p:g}"
        else:
            text = f"iid delay {settings.min_delay}..{settings.delay}"
        return text + (" +view" if settings.pending_view else "")


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
    :param delay: the execution delay (``None`` or ``DelaySettings()``: none)
    :param monitor_file: CSV file of the ``EpisodeMonitor`` (``.monitor.csv`` is appended); ``None``: no file
    :param pixels: render DeepMind Control tasks as images (``obs="pixels"``)
    :param monitor_kwargs: more ``EpisodeMonitor`` keywords (rl_zoo3's ``monitor_kwargs``: ``info_keywords``, ...)
    :param env_kwargs: passed to the factory (``make_atari`` / ``make_dmc`` / ``make_minatar``) or to ``gym.make``
    :return: the wrapped environment
    """
    settings = (delay or DelaySettings()).resolved()
    process = settings.make_process()
    kind = env_kind(env_id)
    monitor = {**(monitor_kwargs or {}), "filename": monitor_file}
    name = env_id.id if isinstance(env_id, EnvSpec) else env_id  # the factories look ALE and dm_control ids up
    if pixels and kind != "dmc":
        raise ZooError(f"--pixels applies to dm_control/ ids, not to {name!r}")
    if kind in ("atari", "dmc", "minatar"):
        factory_kwargs: dict[str, Any] = dict(
            delay=process,
            init_action=settings.init_action,
            pending_view=settings.pending_view,
            monitor=monitor,
        )
        if kind == "atari":
            return make_atari(name, **factory_kwargs, **env_kwargs)
        if kind == "minatar":
            return make_minatar(name, **factory_kwargs, **env_kwargs)
        if pixels:
            factory_kwargs["obs"] = "pixels"
        return make_dmc(name, **factory_kwargs, **env_kwargs)
    env: gym.Env = gym.make(env_id, **env_kwargs)
    return add_delay(add_episode_monitor(env, monitor), settings)


def add_delay(env: gym.Env, settings: DelaySettings) -> gym.Env:
    """``env`` under the :class:`~delayzoo.wrappers.ExecutionDelay` (and pending view) ``settings`` describe."""
    process = settings.make_process()
    if process is None:
        return env
    env = ExecutionDelay(env, process, init_action=settings.init_action)
    return PendingActionsObservation(env) if settings.pending_view else env
