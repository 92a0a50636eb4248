"""The cells of a sweep: envs x delays x agents x seeds, from flags or from a grid file.

A plain sweep's agents are algorithms (``--algos ppo dqn``). A grid file names *variants* instead: an
agent is a label with an algorithm, its own ``-params``, and whether it observes the pending actions,
so that several modes of one algorithm are lines of their own (``pwm-forecast``, ``pwm-oblivious``).
The file also gives each env its own delays and each algorithm on that env its own ``train`` and
``eval`` flags (an algorithm's eval flags come after the sweep's, so they win)::

    seeds: [0, 1, 2]
    delay_process: random-walk          # one process for every delayed cell
    delay_args: [--init-action, random] # flags of every delayed cell's train command
    train_args: [--eval-freq, "-1"]     # flags of every train command
    envs:
      CartPole-v1:
        delays: [0, 2, 5, 10]
        seeds: [0, 1, 2, 3, 4]          # this env's seeds (default: the grid's)
        budget: 20000                   # env steps at which plot compares the agents (--at-steps)
        train_args: {pwm: [--preset, delayed, --save-freq, "2000"]}   # per algorithm on this env
        eval_args: {delayed_ez: [--n-envs, "8"]}                      # its eval flags on this env
    variants:
      ppo: {algo: ppo}
      ppo+view: {algo: ppo, pending_view: true}
      pwm-forecast: {algo: pwm, pending_view: true, params: {delay_mode: forecast}}
      pwm-augmented: {algo: pwm, pending_view: true, params: {delay_mode: augmented}, envs: [CartPole-v1]}
      ppo-obs: {algo: ppo, delay_kind: observation}   # the cell's delay delays the observations instead

At delay 0 the variants of one algorithm are the same agent (no action is pending), so a grid file
runs each algorithm once there: the cell ``<algo>_<env>_<process>0_seed<seed>``, on the undelayed env
(no delay wrapper, so the entries it names must have no ``delay:`` mapping), without the view and
without the variants' ``-params``; :mod:`delayzoo.zoo.plot` draws it at delay 0 on every line of that
algorithm. ``delay_aware`` (default: ``pending_view``) says whether a variant is drawn solid (it uses
the pending actions) or dashed (delay-oblivious). ``delay_kind: observation`` (default: ``execution``)
makes a variant's delays observation delays (``--obs-delay D --obs-delay-process <delay_process>``;
``delay_args`` apply to execution delays only): its cells are named with ``obs-`` before the delay
(``ppo-obs_CartPole-v1_obs-random-walk5_seed0``) and :mod:`delayzoo.zoo.plot` marks its line.

Each cell records what it is in ``<cell folder>/cell.yml`` (:data:`CELL_RECORD`): label, algorithm,
env, delay, seed, params, and the CPU seconds its commands took, which the sweep uses to project the
CPU time of the cells left.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from huggingface_sb3 import EnvironmentName

from delayzoo.zoo.delay_settings import KINDS, PROCESSES
from delayzoo.zoo.errors import ZooError

__all__ = ["CELL_RECORD", "Cell", "Grid", "Variant", "load_grid", "read_cell_record", "sweep_grid"]

CELL_RECORD = "cell.yml"
"""The file in a cell folder that says what the cell is and what it cost."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named agent of a grid file.

    :param label: its name in cell folders, records and plot lines (``pwm-forecast``)
    :param algo: the algorithm (``ppo``, ``pwm``, ``delayed_ez``, ...)
    :param params: ``-params`` items of its train commands (``("delay_mode:'forecast'",)``)
    :param pending_view: it observes the pending actions (``--pending-view``; else ``--no-pending-view``)
    :param delay_aware: drawn as a delay-aware agent (default: ``pending_view``)
    :param envs: the envs it runs on (``None``: all of the grid's)
    :param delay_kind: ``"execution"`` or ``"observation"``: what its cells' delays delay
    """

    label: str
    algo: str
    params: tuple[str, ...] = ()
    pending_view: bool = False
    delay_aware: bool | None = None
    envs: tuple[str, ...] | None = None
    delay_kind: str = "execution"

    @property
    def aware(self) -> bool:
        """Whether the variant is drawn as delay-aware."""
        return self.pending_view if self.delay_aware is None else self.delay_aware


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell of a grid: an agent on an env at one delay setting and seed.

    ``label`` is ``None`` for a plain sweep's cells (the agent is ``algo`` with the sweep's flags);
    a grid file's cells carry their variant's label, ``params``, ``args`` (the env's train flags for ``algo``),
    ``eval_args`` (its eval flags there) and ``delay_kind`` (what ``delay`` delays: ``"execution"`` or
    ``"observation"``).
    """

    algo: str
    env_id: str
    delay: int
    process: str
    pending_view: bool
    seed: int
    label: str | None = None
    params: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    delay_aware: bool | None = None
    delay_args: tuple[str, ...] = ()
    eval_args: tuple[str, ...] = ()
    delay_kind: str = "execution"

    @property
    def agent(self) -> str:
        """The agent's name: the variant's label, or the algorithm."""
        return self.label or self.algo

    @property
    def name(self) -> str:
        """The cell folder's name: ``ppo_CartPole-v1_delay2_seed0``,
        ``pwm-forecast_CartPole-v1_random-walk5+view_seed1``, ``ppo-obs_CartPole-v1_obs-delay2_seed0``."""
        delay = f"delay{self.delay}" if self.process == "constant" else f"{self.process}{self.delay}"
        kind = "obs-" if self.delay_kind == "observation" else ""
        view = "+view" if self.pending_view else ""
        return f"{self.agent}_{EnvironmentName(self.env_id)}_{kind}{delay}{view}_seed{self.seed}"

    def train_args(self, log_folder: Path) -> list[str]:
        """The cell's own ``train`` flags (the sweep adds ``args``, the passed-through ones and ``params``)."""
        args = ["--algo", self.algo, "--env", self.env_id, "--seed", str(self.seed), "-f", str(log_folder / self.name)]
        if self.delay_kind == "observation":
            args += ["--obs-delay", str(self.delay), "--obs-delay-process", self.process]
        elif self.label is None or self.delay > 0:  # a grid file's delay-0 cell runs the undelayed env
            args += ["--delay", str(self.delay), "--delay-process", self.process, *self.delay_args]
        if self.pending_view:
            return [*args, "--pending-view"]
        return [*args, "--no-pending-view"] if self.label is not None else args

    def record(self) -> dict[str, Any]:
        """What :data:`~delayzoo.zoo.grid.CELL_RECORD` holds about the cell (plain data)."""
        return {
            "label": self.agent,
            "algo": self.algo,
            "env": self.env_id,
            "delay": self.delay,
            "delay_kind": self.delay_kind,
            "process": self.process,
            "pending_view": self.pending_view,
            "delay_aware": self.pending_view if self.delay_aware is None else self.delay_aware,
            "seed": self.seed,
            "params": list(self.params),
        }


def read_cell_record(folder: Path) -> dict[str, Any]:
    """The :data:`CELL_RECORD` of a cell folder as plain data (``{}`` without one)."""
    path = folder / CELL_RECORD
    if not path.is_file():
        return {}
    try:
        content = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ZooError(f"{path} is not plain YAML data ({str(error).splitlines()[0]})") from None
    return content if isinstance(content, dict) else {}


def sweep_grid(
    algos: Sequence[str],
    envs: Sequence[str],
    delays: Sequence[int],
    seeds: Sequence[int],
    processes: Sequence[str] = ("constant",),
    pending_view: bool = False,
    delay_kind: str = "execution",
) -> list[Cell]:
    """The cells of a plain sweep, in order (duplicates dropped); a :class:`ZooError` when an axis is empty.

    ``delay_kind`` says what the delays delay (``"execution"`` or ``"observation"``)."""
    axes = {"--algos": algos, "--envs": envs, "--delays": delays, "--seeds": seeds, "--delay-process": processes}
    empty = [flag for flag, values in axes.items() if not values]
    if empty:
        raise ZooError(f"empty grid: {', '.join(empty)} {'has' if len(empty) == 1 else 'have'} no values")
    cells = [
        Cell(algo, env_id, delay, process, pending_view, seed, delay_kind=delay_kind)
        for algo, env_id, process, delay, seed in itertools.product(algos, envs, processes, delays, seeds)
    ]
    return list(dict.fromkeys(cells))


@dataclasses.dataclass(frozen=True)
class Grid:
    """A grid file's content (see the module docstring).

    :param envs: env id -> its delays
    :param variants: the agents
    :param seeds: training seeds
    :param process: the delay process of every cell
    :param train_args: flags of every train command
    :param env_args: env id -> algorithm -> that algorithm's flags on that env
    :param delay_args: flags of the delayed cells' train commands (``--init-action random``, ``--delay-p``)
    :param env_eval_args: env id -> algorithm -> that algorithm's eval flags on that env
    :param env_seeds: env id -> its own training seeds (instead of ``seeds``)
    :param budgets: env id -> the env steps at which :mod:`delayzoo.zoo.plot` compares the agents
    """

    envs: dict[str, tuple[int, ...]]
    variants: tuple[Variant, ...]
    seeds: tuple[int, ...]
    process: str = "constant"
    train_args: tuple[str, ...] = ()
    env_args: dict[str, dict[str, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    delay_args: tuple[str, ...] = ()
    env_eval_args: dict[str, dict[str, tuple[str, ...]]] = dataclasses.field(default_factory=dict)
    env_seeds: dict[str, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    budgets: dict[str, int] = dataclasses.field(default_factory=dict)

    def cells(self) -> list[Cell]:
        """The cells, env by env: delay 0 once per algorithm, then every variant at every other delay."""
        cells = []
        for env_id, delays in self.envs.items():
            variants = [variant for variant in self.variants if variant.envs is None or env_id in variant.envs]
            algos = list(dict.fromkeys(variant.algo for variant in variants))
            for delay, seed in itertools.product(delays, self.env_seeds.get(env_id, self.seeds)):
                if delay == 0:
                    cells += [
                        Cell(
                            algo,
                            env_id,
                            0,
                            self.process,
                            False,
                            seed,
                            algo,
                            (),
                            self._args(env_id, algo),
                            eval_args=self._eval_args(env_id, algo),
                        )
                        for algo in algos
                    ]
                    continue
                cells += [
                    Cell(
                        variant.algo,
                        env_id,
                        delay,
                        self.process,
                        variant.pending_view,
                        seed,
                        variant.label,
                        variant.params,
                        self._args(env_id, variant.algo),
                        variant.aware,
                        self.delay_args if variant.delay_kind == "execution" else (),
                        self._eval_args(env_id, variant.algo),
                        variant.delay_kind,
                    )
                    for variant in variants
                ]
        return list(dict.fromkeys(cells))

    def _args(self, env_id: str, algo: str) -> tuple[str, ...]:
        return (*self.train_args, *self.env_args.get(env_id, {}).get(algo, ()))

    def _eval_args(self, env_id: str, algo: str) -> tuple[str, ...]:
        return self.env_eval_args.get(env_id, {}).get(algo, ())


def _params(entries: Any, where: str) -> tuple[str, ...]:
    """``{key: value}`` as rl_zoo3's ``-params`` items (``key:repr(value)``)."""
    if entries is None:
        return ()
    if not isinstance(entries, dict):
        raise ZooError(f"{where}: params must be a mapping of hyperparameters, got {entries!r}")
    return tuple(f"{key}:{value!r}" for key, value in entries.items())


def _strings(values: Any, where: str) -> tuple[str, ...]:
    if values is None:
        return ()
    if not isinstance(values, list) or not all(isinstance(value, (str, int, float)) for value in values):
        raise ZooError(f"{where} must be a list of command-line words, got {values!r}")
    return tuple(str(value) for value in values)


def _per_algo(entry: Any, where: str) -> dict[str, tuple[str, ...]]:
    """``{algo: [flags]}`` as algorithm -> command-line words."""
    if entry is None:
        return {}
    if not isinstance(entry, dict):
        raise ZooError(f"{where} must map algorithms to flags, got {entry!r}")
    return {algo: _strings(flags, f"{where}.{algo}") for algo, flags in entry.items()}


def _ints(values: Any, where: str) -> tuple[int, ...]:
    """Delays or seeds: distinct integers >= 0 (rl_zoo3 turns a negative seed into a random one)."""
    valid = isinstance(values, list) and values and all(type(value) is int and value >= 0 for value in values)
    repeated = sorted({value for value in values if values.count(value) > 1}) if valid else []
    if not valid or repeated:
        twice = f" ({repeated[0]} twice)" if repeated else ""
        raise ZooError(f"{where} must be a non-empty list of distinct integers >= 0, got {values!r}{twice}")
    return tuple(values)


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file (plain YAML, see the module docstring).

    :raise ZooError: naming the file and the entry for anything missing or malformed
    """
    try:
        content = yaml.safe_load(Path(path).read_text())
    except OSError as error:
        raise ZooError(f"cannot read the grid file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise ZooError(f"{path} is not plain YAML data ({str(error).splitlines()[0]})") from None
    if not isinstance(content, dict):
        raise ZooError(f"{path} must hold a mapping with envs, variants and seeds")
    expected = ["envs", "variants", "seeds", "delay_process", "delay_args", "train_args"]
    unknown = sorted(set(content) - set(expected))
    if unknown:
        raise ZooError(f"{path}: unknown entries {unknown}; expected some of {expected}")
    process = content.get("delay_process", "constant")
    if process not in PROCESSES:
        raise ZooError(f"{path}: delay_process must be one of {list(PROCESSES)}, got {process!r}")
    envs_entry = content.get("envs")
    if not isinstance(envs_entry, dict) or not envs_entry:
        raise ZooError(f"{path}: envs must map env ids to {{delays: [...]}}, got {envs_entry!r}")
    envs, env_args, env_eval_args, env_seeds, budgets = {}, {}, {}, {}, {}
    for env_id, entry in envs_entry.items():
        where = f"{path}: envs.{env_id}"
        if not isinstance(entry, dict) or set(entry) - {"delays", "seeds", "budget", "train_args", "eval_args"}:
            raise ZooError(
                f"{where} must be a mapping with delays (and seeds, budget, train_args, eval_args), got {entry!r}"
            )
        envs[env_id] = _ints(entry.get("delays"), f"{where}.delays")
        if "seeds" in entry:
            env_seeds[env_id] = _ints(entry["seeds"], f"{where}.seeds")
        if "budget" in entry:
            budget = entry["budget"]
            if type(budget) is not int or budget < 1:
                raise ZooError(f"{where}.budget must be a number of env steps >= 1, got {budget!r}")
            budgets[env_id] = budget
        env_args[env_id] = _per_algo(entry.get("train_args"), f"{where}.train_args")
        env_eval_args[env_id] = _per_algo(entry.get("eval_args"), f"{where}.eval_args")
    variants_entry = content.get("variants")
    if not isinstance(variants_entry, dict) or not variants_entry:
        raise ZooError(f"{path}: variants must map labels to {{algo: ...}}, got {variants_entry!r}")
    variants = []
    for label, entry in variants_entry.items():
        where = f"{path}: variants.{label}"
        fields = {"algo", "params", "pending_view", "delay_aware", "envs", "delay_kind"}
        if not isinstance(entry, dict) or "algo" not in entry or set(entry) - fields:
            raise ZooError(f"{where} must be a mapping with algo (and {sorted(fields - {'algo'})}), got {entry!r}")
        if not str(label) or any(char in str(label) for char in "/_ "):
            raise ZooError(f"{where}: a label may not be empty or hold '/', '_' or spaces (it names cell folders)")
        delay_kind = entry.get("delay_kind", "execution")
        if delay_kind not in KINDS:
            raise ZooError(f"{where}.delay_kind must be one of {list(KINDS)}, got {delay_kind!r}")
        only = entry.get("envs")
        if only is not None and (not isinstance(only, list) or set(only) - set(envs)):
            raise ZooError(f"{where}.envs must list some of the grid's envs {list(envs)}, got {only!r}")
        variants.append(
            Variant(
                str(label),
                str(entry["algo"]),
                _params(entry.get("params"), where),
                bool(entry.get("pending_view", False)),
                entry.get("delay_aware"),
                None if only is None else tuple(only),
                delay_kind,
            )
        )
    seeds = _ints(content.get("seeds", [0]), f"{path}: seeds")
    train_args = _strings(content.get("train_args"), f"{path}: train_args")
    delay_args = _strings(content.get("delay_args"), f"{path}: delay_args")
    return Grid(
        envs, tuple(variants), seeds, process, train_args, env_args, delay_args, env_eval_args, env_seeds, budgets
    )
