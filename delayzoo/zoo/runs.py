"""The runs in a log folder (rl_zoo3's layout), read without executing anything from the files.

A run of ``--algo ppo --env CartPole-v1 -f logs`` is the folder ``logs/ppo/CartPole-v1_<id>/`` (with
``-uuid``: ``CartPole-v1_<id>_<uuid>``, where several runs can share an id) with the
final model ``CartPole-v1.zip``, checkpoints ``rl_model_<steps>_steps.zip``, monitor files
``<rank>.monitor.csv``, ``evaluations.npz`` and the sub-folder ``CartPole-v1/`` holding ``args.yml``,
``config.yml`` (and ``vecnormalize.pkl`` when observations are normalised). A sweep
(:mod:`delayzoo.zoo.sweep`) gives each cell a log folder of its own inside its log folder
(``logs/ppo_CartPole-v1_delay2_seed0/ppo/CartPole-v1_1/``): runs are looked for at both depths.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from huggingface_sb3 import EnvironmentName

from delayzoo.zoo.delay_settings import FLAG_FIELDS, DelaySettings
from delayzoo.zoo.errors import ZooError
from delayzoo.zoo.rl_zoo3_wrappers import is_replay_entry

__all__ = ["Run", "find_runs", "is_plain_data", "read_monitor", "read_run_yaml", "select_run"]

_CHECKPOINT = re.compile(r"rl_model_(\d+)_steps\.zip$")
_RUN_FOLDER = re.compile(r"_(\d+)(_[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})?$")
"""The end of a run folder's name: ``_<id>``, or ``_<id>_<uuid>`` for runs made with ``-uuid``."""


class _RunLoader(yaml.SafeLoader):
    """A safe YAML loader that also reads the ordered dicts and tuples rl_zoo3 writes (as plain data)."""


def _ordered_dict(loader: yaml.SafeLoader, node: Any) -> dict[Any, Any]:
    pairs = loader.construct_sequence(node.value[0], deep=True) if node.value else []
    return {key: value for key, value in pairs}


_RunLoader.add_constructor("tag:yaml.org,2002:python/object/apply:collections.OrderedDict", _ordered_dict)
def _tuple(loader: yaml.SafeLoader, node: Any) -> tuple[Any, ...]:
    return tuple(loader.construct_sequence(node, deep=True))


_RunLoader.add_constructor("tag:yaml.org,2002:python/tuple", _tuple)


def is_plain_data(value: Any) -> bool:
    """Whether ``value`` is what a safe YAML reader builds: ``None``, booleans, numbers, strings, and lists and
    string-keyed dicts of them (a class or a tuple is not)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, list):
        return all(is_plain_data(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and is_plain_data(item) for key, item in value.items())
    return False


_PYTHON_TAG = re.compile(r"tag:yaml\.org,2002:python/(?:name|object|module)[^:']*:([^']*)")


def read_run_yaml(path: str | Path) -> dict[str, Any]:
    """Read ``args.yml`` / ``config.yml`` of a run; nothing but plain data is constructed.

    :raise ZooError: for a file that is not plain YAML data (e.g. with Python tags) or not a mapping; a run
        trained with a ``-params`` value naming a class before the zoo recorded such values as text is told
        how to repair or rerun it
    """
    try:
        with open(path) as handle:
            content = yaml.load(handle, Loader=_RunLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        tag = _PYTHON_TAG.search(str(error))
        if tag is not None:
            raise ZooError(
                f"{path} is not plain YAML data: it records a Python object ({tag.group(1)}), as "
                "runs trained with a -params value naming a class (policy_kwargs:dict(activation_fn=nn.ReLU)) did "
                "before the zoo recorded such values as text; repair the run by writing that value as the text "
                "given (policy_kwargs: 'dict(activation_fn=nn.ReLU)') in its args.yml and config.yml, or rerun it"
            ) from None
        raise ZooError(f"{path} is not plain YAML data ({first})") from None
    if content is not None and not isinstance(content, dict):
        raise ZooError(f"{path} must hold a mapping, got {type(content).__name__}")
    return content or {}


@dataclasses.dataclass
class Run:
    """One training run of the zoo.

    :param path: the run folder (``logs/ppo/CartPole-v1_1``)
    :param algo: the algorithm name
    :param env_id: the Gymnasium id
    :param args: its ``args.yml``
    :param config: its ``config.yml``
    """

    path: Path
    algo: str
    env_id: str
    args: dict[str, Any]
    config: dict[str, Any]

    @property
    def env_name(self) -> str:
        """The env id as rl_zoo3 writes it in file names (``ALE/Pong-v5`` -> ``ALE-Pong-v5``)."""
        return str(EnvironmentName(self.env_id))

    @property
    def name(self) -> str:
        """The run folder's name (``CartPole-v1_1``)."""
        return self.path.name

    @property
    def run_id(self) -> int:
        """The number rl_zoo3 gave the run (runs made with ``-uuid`` can share one)."""
        match = _RUN_FOLDER.search(self.path.name)
        if match is None:
            raise ZooError(f"{self.path} is not a run folder (<env>_<id> or <env>_<id>_<uuid>)")
        return int(match.group(1))

    @property
    def created(self) -> float:
        """When the run started (the time of its ``args.yml``), to order runs that share an id."""
        args_files = sorted(self.path.glob("*/args.yml"))
        return args_files[0].stat().st_mtime if args_files else 0.0

    @property
    def params_path(self) -> Path:
        """The folder of ``args.yml``, ``config.yml`` and ``vecnormalize.pkl``."""
        return self.path / self.env_name

    @property
    def final_model(self) -> Path:
        """The model saved at the end of training (or at Ctrl-C)."""
        return self.path / f"{self.env_name}.zip"

    @property
    def eval_csv(self) -> Path:
        """Where ``delayzoo.zoo.eval`` writes the run's scores: ``<log folder>/eval_result/<algo>/<run>.csv``."""
        return self.path.parents[1] / "eval_result" / self.algo / f"{self.name}.csv"

    def checkpoints(self) -> list[tuple[int, Path]]:
        """``(steps, path)`` of the ``rl_model_<steps>_steps.zip`` checkpoints, by steps."""
        found = []
        for path in self.path.glob("rl_model_*_steps.zip"):
            match = _CHECKPOINT.search(path.name)
            if match:
                found.append((int(match.group(1)), path))
        return sorted(found)

    def delay_settings(self) -> DelaySettings:
        """The :class:`~delayzoo.zoo.delay_settings.DelaySettings` of ``args.yml`` (none for plain rl_zoo3 runs)."""
        recorded = {field: self.args.get(name) for name, field in FLAG_FIELDS.items()}
        return DelaySettings(**{field: value for field, value in recorded.items() if value is not None})

    def env_wrappers(self) -> list[Any] | None:
        """The ``env_wrapper`` entries of the YAML entry (``config.yml`` less the zoo's own replay entry)."""
        wrappers = self.config.get("env_wrapper")
        if wrappers is None:
            return None
        wrappers = wrappers if isinstance(wrappers, list) else [wrappers]
        kept = [wrapper for wrapper in wrappers if not is_replay_entry(wrapper)]
        return kept or None

    def env_kwargs(self) -> dict[str, Any]:
        """The keywords the run's envs were made with (command line first, then the YAML entry)."""
        return dict(self.args.get("env_kwargs") or self.config.get("env_kwargs") or {})


def _load_run(path: Path) -> Run | None:
    args_files = sorted(path.glob("*/args.yml"))
    if not args_files:
        return None
    args = read_run_yaml(args_files[0])
    config_file = args_files[0].parent / "config.yml"
    config = read_run_yaml(config_file) if config_file.is_file() else {}
    if "algo" not in args or "env" not in args:
        return None
    return Run(path=path, algo=str(args["algo"]), env_id=str(args["env"]), args=args, config=config)


def find_runs(log_folder: str | Path, algos: list[str] | None = None, env_ids: list[str] | None = None) -> list[Run]:
    """Every run under ``log_folder`` (``<algo>/<env>_<id>/``, or ``<cell>/<algo>/<env>_<id>/`` of a sweep),
    optionally of some algorithms and envs only."""
    runs = []
    folder = Path(log_folder)
    for path in sorted([*folder.glob("*/*_*"), *folder.glob("*/*/*_*")]):
        if not path.is_dir() or not _RUN_FOLDER.search(path.name):
            continue
        run = _load_run(path)
        if run is None or (algos and run.algo not in algos) or (env_ids and run.env_id not in env_ids):
            continue
        runs.append(run)
    return sorted(runs, key=lambda run: (run.algo, run.env_id, run.run_id, run.created, run.name))


def select_run(log_folder: str | Path, algo: str, env_id: str, exp_id: int = 0) -> Run:
    """The run ``exp_id`` of ``algo`` on ``env_id`` (0: the latest), or a :class:`ZooError` listing those there are.

    Of runs that share the id (made with ``-uuid``), the one started last.
    """
    runs = find_runs(log_folder, [algo], [env_id])
    if not runs:
        raise ZooError(f"no run of --algo {algo} --env {env_id} under {str(log_folder)!r}")
    if exp_id == 0:
        return runs[-1]
    for run in reversed(runs):
        if run.run_id == exp_id:
            return run
    raise ZooError(f"no run {exp_id} of --algo {algo} --env {env_id}; runs there: {[run.run_id for run in runs]}")


def read_monitor(run: Run) -> tuple[np.ndarray, np.ndarray]:
    """Training episodes of a run as ``(steps, returns)``: the step count at the end of each episode.

    Episodes of all ranks are put in the order they ended (wall-clock time); the steps start from the
    counter of the model the run resumed from, if any.
    """
    ends, lengths, returns = [], [], []
    for path in sorted(run.path.glob("*.monitor.csv")):
        with open(path) as handle:
            header = handle.readline()
            start = float(json.loads(header.lstrip("#")).get("t_start", 0.0))
            table = np.genfromtxt(handle, delimiter=",", names=True, dtype=float, ndmin=1)
        if table.size == 0:
            continue
        ends.append(start + table["t"])
        lengths.append(table["l"])
        returns.append(table["r"])
    if not ends:
        return np.zeros(0), np.zeros(0)
    order = np.argsort(np.concatenate(ends), kind="stable")
    steps = np.cumsum(np.concatenate(lengths)[order]) + int(run.args.get("resume_timesteps") or 0)
    return steps, np.concatenate(returns)[order]
