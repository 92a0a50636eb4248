"""The delay settings of a zoo run: what its delay flags (or a YAML entry's ``delay:`` mapping) say, checked,
with their defaults, recorded in ``args.yml`` / ``config.yml`` and turned into delay processes.

:class:`DelaySettings` holds the execution and the observation delay (each a :class:`ProcessSettings`), the
pending view and the actions queued at reset. This module imports neither torch nor Stable-Baselines3: the
commands that only read runs (plot, the sweep's planning) use it without them.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from delayzoo.wrappers.delay import (
    MAX_DELAY,
    ConstantDelay,
    DelayProcess,
    IIDDelay,
    RandomWalkDelay,
    TraceDelay,
)
from delayzoo.zoo.errors import ZooError

__all__ = [
    "DEFAULT_P",
    "FLAG_FIELDS",
    "INIT_ACTIONS",
    "KINDS",
    "PROCESSES",
    "TRACE",
    "DelaySettings",
    "ProcessSettings",
]

PROCESSES = ("constant", "random-walk", "iid")
"""The delay processes the flags name (``--delay-process``, ``--obs-delay-process``)."""
TRACE = "trace"
"""The process of a delay replayed from a file (``--delay-trace``, ``--obs-delay-trace``): the file sets it."""
INIT_ACTIONS = ("noop", "random")
DEFAULT_P = 0.2
KINDS = ("execution", "observation")
"""The two kinds of delay: of the actions on their way to the env, of the observations on their way back."""

FLAG_FIELDS = {
    "delay": "delay",
    "delay_process": "process",
    "delay_p": "p",
    "min_delay": "min_delay",
    "delay_trace": "trace",
    "obs_delay": "obs_delay",
    "obs_delay_process": "obs_process",
    "obs_delay_p": "obs_p",
    "obs_min_delay": "obs_min_delay",
    "obs_delay_trace": "obs_trace",
    "pending_view": "pending_view",
    "init_action": "init_action",
}
"""The delay flags' names (argparse's and ``args.yml``'s) -> the :class:`DelaySettings` fields they set."""
_FLAGS = {field: "--" + name.replace("_", "-") for name, field in FLAG_FIELDS.items()}
_PREFIX = {"execution": "", "observation": "obs_"}
"""What a :class:`ProcessSettings` field is called in :class:`DelaySettings`, by kind."""
_PROCESS_FIELDS = ("delay", "process", "p", "min_delay", "trace")
"""The fields of :class:`ProcessSettings` that :class:`DelaySettings` holds once per kind."""


@dataclasses.dataclass(frozen=True)
class ProcessSettings:
    """One delay of a run, the execution or the observation delay: the checks, defaults and process of either.

    :param kind: ``"execution"`` or ``"observation"``; it names the flags in messages
    :param delay: the maximum delay (``None`` with no ``trace``: no delay of this kind)
    :param process: ``"constant"``, ``"random-walk"``, ``"iid"``, or ``"trace"`` once resolved with a ``trace``
    :param p: probability of each of -1 and +1 per step (random walk only)
    :param min_delay: the smallest delay (random walk and iid only)
    :param trace: a CSV file whose ``delay`` column holds per-step delays
        (:meth:`~delayzoo.wrappers.TraceDelay.from_csv`)
    """

    kind: str
    delay: int | None = None
    process: str = "constant"
    p: float | None = None
    min_delay: int | None = None
    trace: str | None = None

    def flag(self, field: str) -> str:
        """The flag that sets ``field`` of this kind (``"p"`` of the observation delay: ``--obs-delay-p``)."""
        return _FLAGS[_PREFIX[self.kind] + field]

    @property
    def given(self) -> bool:
        """Whether the settings describe a delay (a maximum or a trace)."""
        return self.delay is not None or self.trace is not None

    def orphans(self) -> list[str]:
        """The flags given that need a delay of this kind, when there is none."""
        if self.given:
            return []
        defaults = (("process", "constant"), ("p", None), ("min_delay", None))
        return [self.flag(field) for field, default in defaults if getattr(self, field) != default]

    def load_trace(self, source: str) -> TraceDelay:
        """The :class:`~delayzoo.wrappers.TraceDelay` of ``trace``, or a :class:`ZooError` naming the flag and file."""
        try:
            return TraceDelay.from_csv(str(self.trace))
        except OSError as error:
            reason = error.strerror or error
            raise ZooError(f"{self.flag('trace')} {self.trace} in {source}: cannot read it ({reason})") from None
        except (ValueError, TypeError) as error:
            raise ZooError(f"{self.flag('trace')} {self.trace} in {source}: {error}") from None

    def check(self, source: str) -> None:
        """Raise :class:`ZooError` naming the flag when the settings contradict each other or a value is bad."""
        if self.process not in (*PROCESSES, TRACE):
            raise ZooError(
                f"unknown delay process {self.process!r} in {source}; expected one of {list(PROCESSES)}"
            )
        if self.trace is not None:
            extra = [self.flag(field) for field in ("p", "min_delay") if getattr(self, field) is not None]
            if self.process not in ("constant", TRACE):
                extra.insert(0, f"{self.flag('process')} {self.process}")
            if extra:
                raise ZooError(
                    f"{', '.join(extra)} in {source} {'contradicts' if len(extra) == 1 else 'contradict'} "
                    f"{self.flag('trace')} {self.trace}: the trace gives the delays"
                )
            largest = self.load_trace(source).max_delay
            if self.delay is not None and self.delay != largest:
                raise ZooError(
                    f"{self.flag('delay')} {self.delay} in {source} contradicts {self.flag('trace')} {self.trace}, "
                    f"whose largest delay is {largest}; drop {self.flag('delay')}"
                )
            return
        if self.process == TRACE:
            raise ZooError(f"the {TRACE!r} process in {source} needs {self.flag('trace')} FILE")
        if self.delay is None:
            return
        if isinstance(self.delay, bool) or not isinstance(self.delay, int) or not 0 <= self.delay <= MAX_DELAY:
            raise ZooError(
                f"{self.flag('delay')} must be an integer in [0, {MAX_DELAY}], got {self.delay!r} in {source}"
            )
        if self.process == "constant":
            alternatives = {"p": "random-walk", "min_delay": "random-walk or iid"}
            for field, alternative in alternatives.items():
                value = getattr(self, field)
                if value is not None:
                    raise ZooError(
                        f"{self.flag(field)} {value} in {source} contradicts a constant delay; "
                        f"add {self.flag('process')} {alternative}"
                    )
        if self.process == "iid" and self.p is not None:
            raise ZooError(
                f"{self.flag('p')} {self.p} in {source} applies to {self.flag('process')} random-walk, not iid"
            )
        if self.min_delay is not None:
            if isinstance(self.min_delay, bool) or not isinstance(self.min_delay, int) or self.min_delay < 0:
                raise ZooError(f"{self.flag('min_delay')} must be an integer >= 0, got {self.min_delay!r} in {source}")
            if self.min_delay > self.delay:
                raise ZooError(
                    f"{self.flag('min_delay')} {self.min_delay} is above {self.flag('delay')} {self.delay} in {source}"
                )
        if self.p is not None and (
            isinstance(self.p, bool) or not isinstance(self.p, (int, float)) or not 0.0 <= self.p <= 0.5
        ):
            raise ZooError(f"{self.flag('p')} must be a probability in [0, 0.5], got {self.p!r} in {source}")

    def resolved(self) -> ProcessSettings:
        """The same settings with every default written out; a trace's absolute path, process and largest delay."""
        if not self.given:
            return ProcessSettings(self.kind)
        if self.trace is not None:
            largest = self.load_trace("the delay settings").max_delay
            return ProcessSettings(self.kind, largest, TRACE, trace=os.path.abspath(self.trace))
        p = self.p if self.p is not None or self.process != "random-walk" else DEFAULT_P
        min_delay = self.min_delay if self.min_delay is not None or self.process == "constant" else 0
        return dataclasses.replace(self, p=None if p is None else float(p), min_delay=min_delay)

    def make_process(self) -> DelayProcess | None:
        """The delay process these settings describe, or ``None`` without delay."""
        settings = self.resolved()
        if settings.delay is None:
            return None
        if settings.process == TRACE:
            return settings.load_trace("the delay settings")
        if settings.process == "constant":
            return ConstantDelay(settings.delay)
        min_delay = settings.min_delay or 0
        if settings.process == "random-walk":
            p = DEFAULT_P if settings.p is None else settings.p
            return RandomWalkDelay(settings.delay, p=p, min_delay=min_delay)
        return IIDDelay(list(range(min_delay, settings.delay + 1)))

    def label(self) -> str:
        """``"delay=2"``, ``"random-walk delay 0..5 p=0.2"``, ``"trace delay 0..6 (example_trace.csv)"``; ``""``
        without delay. The observation delay's starts with ``obs-``."""
        settings = self.resolved()
        if settings.delay is None:
            return ""
        marker = "obs-" if self.kind == "observation" else ""
        if settings.process == "constant":
            return f"{marker}delay={settings.delay}"
        if settings.process == "random-walk":
            return f"{marker}random-walk delay {settings.min_delay}..{settings.delay} p={settings.p:g}"
        if settings.process == TRACE:
            return f"{marker}trace delay 0..{settings.delay} ({os.path.basename(str(settings.trace))})"
        return f"{marker}iid delay {settings.min_delay}..{settings.delay}"


@dataclasses.dataclass(frozen=True)
class DelaySettings:
    """The delays of a run, as the zoo's flags and YAML ``delay:`` entries give them.

    The execution delay is ``delay`` (the largest; ``None``: no delay wrapper), ``process`` (``"constant"``:
    every action waits ``delay`` steps; ``"random-walk"``: :class:`~delayzoo.wrappers.RandomWalkDelay`
    between ``min_delay`` and ``delay`` with step probability ``p``; ``"iid"``: uniform over
    ``min_delay..delay``, drawn independently each step) or ``trace`` (a file of per-step delays,
    :class:`~delayzoo.wrappers.TraceDelay`). The observation delay has the same fields, prefixed ``obs_``
    (:class:`~delayzoo.wrappers.ObservationDelay`). :attr:`execution` and :attr:`observation` give each as
    :class:`ProcessSettings`, which checks and builds both kinds alike.

    :param pending_view: give the agent the pending actions (:class:`~delayzoo.wrappers.PendingActionsObservation`)
    :param init_action: the execution delay's queue filler at reset, ``"noop"`` or ``"random"``
    """

    delay: int | None = None
    process: str = "constant"
    p: float | None = None
    min_delay: int | None = None
    pending_view: bool = False
    init_action: str = "noop"
    trace: str | None = None
    obs_delay: int | None = None
    obs_process: str = "constant"
    obs_p: float | None = None
    obs_min_delay: int | None = None
    obs_trace: str | None = None

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

    def _process(self, kind: str) -> ProcessSettings:
        prefix = _PREFIX[kind]
        return ProcessSettings(kind, **{field: getattr(self, prefix + field) for field in _PROCESS_FIELDS})

    @property
    def execution(self) -> ProcessSettings:
        """The execution delay's settings."""
        return self._process("execution")

    @property
    def observation(self) -> ProcessSettings:
        """The observation delay's settings."""
        return self._process("observation")

    @property
    def delayed(self) -> bool:
        """Whether there is a delay of either kind."""
        return self.execution.given or self.observation.given

    def check(self, source: str) -> None:
        """Raise :class:`ZooError` naming the flag when the settings contradict each other."""
        if self.init_action not in INIT_ACTIONS:
            raise ZooError(
                f"unknown init action {self.init_action!r} in {source}; expected one of {list(INIT_ACTIONS)}"
            )
        execution, observation = self.execution, self.observation
        for settings in (execution, observation):
            settings.check(source)
        filler = not execution.given and self.init_action != "noop"  # the fillers are the execution queue's
        orphans = execution.orphans() + ([_FLAGS["init_action"]] if filler else [])
        if self.pending_view and not self.delayed:
            orphans.append(_FLAGS["pending_view"])
        if orphans:
            verb = "needs" if len(orphans) == 1 else "need"
            either = f" or {_FLAGS['obs_delay']} N" if _FLAGS["pending_view"] in orphans else ""
            raise ZooError(f"{', '.join(orphans)} in {source} {verb} --delay N (the maximum delay){either}")
        orphans = observation.orphans()
        if orphans:
            verb = "needs" if len(orphans) == 1 else "need"
            raise ZooError(f"{', '.join(orphans)} in {source} {verb} --obs-delay N (the maximum observation delay)")

    def resolved(self) -> DelaySettings:
        """The same settings with every default written out (what a run records to be repeatable)."""
        if not self.delayed:
            return DelaySettings()
        fields: dict[str, Any] = {"pending_view": self.pending_view, "init_action": self.init_action}
        for kind in KINDS:
            settings = self._process(kind).resolved()
            fields.update({_PREFIX[kind] + name: getattr(settings, name) for name in _PROCESS_FIELDS})
        return DelaySettings(**fields)

    def merged(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """These settings as a dict, overridden key by key by ``overrides`` (the flags given).

        For each kind, a different ``process`` in ``overrides`` drops ``p`` and ``min_delay``, which belong to
        the old one; a ``trace`` drops the maximum and the process, and a maximum drops the trace.
        """
        entries = {key: value for key, value in self._fields().items() if value is not None}
        for prefix in _PREFIX.values():
            dropped: tuple[str, ...] = ()
            if prefix + "trace" in overrides:
                dropped = ("delay", "process", "p", "min_delay")
            elif prefix + "delay" in overrides:
                dropped = ("trace",)
            if prefix + "process" in overrides and overrides[prefix + "process"] != entries.get(prefix + "process"):
                dropped += ("p", "min_delay")
            for name in dropped:
                entries.pop(prefix + name, None)
        entries.update(overrides)
        return entries

    def make_process(self) -> DelayProcess | None:
        """The execution delay's process, or ``None`` without one."""
        return self.execution.make_process()

    def to_record(self) -> dict[str, Any]:
        """Plain data for ``args.yml`` / ``config.yml``: every field, but those of a trace or an observation
        delay only when there is one (so that a record without them reads as it did before they existed)."""
        return self.resolved()._fields()

    def _fields(self) -> dict[str, Any]:
        """The fields as a dict, less the trace's and the observation delay's when there are none."""
        fields = dataclasses.asdict(self)
        absent = [] if self.trace is not None else ["trace"]
        if not self.observation.given:
            absent += ["obs_" + name for name in _PROCESS_FIELDS]
        return {name: value for name, value in fields.items() if name not in absent}

    def label(self) -> str:
        """A short description for logs and plots: ``"no delay"``, ``"random-walk delay 0..5 p=0.2 +view"``,
        ``"delay=2, obs-delay=3"``."""
        settings = self.resolved()
        if not settings.delayed:
            return "no delay"
        text = ", ".join(label for label in (settings.execution.label(), settings.observation.label()) if label)
        return text + (" +view" if settings.pending_view else "")
