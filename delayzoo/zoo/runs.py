"""The runs in a log folder (rl_zoo3's layout), read without executing anything from the files.

A run of ``--algo ppo --env CartPole-v1 -f logs`` is the folder ``logs/ppo/CartPole-v1_<id>/`` with the
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

from delayzoo.zoo.envs import DelaySettings
from delayzoo.zoo.errors import ZooError

__all__ = ["Run", "find_runs", "read_monitor", "read_run_yaml", "select_run"]

_CHECKPOINT = re.compile(r"rl_model_(\d+)_steps\.zip$")


class _RunLoader(yaml.SafeLoader):
    """A safe YAML loader that also reads the ordered dicts rl_zoo3 writes (as plain dicts)."""


def _ordered_dict(loader: yaml.SafeLoader, node: yaml.Node) -> dict[Any, Any]:
    pairs = loader.construct_sequence(node.value[0], deep=True) if node.value else []
    return {key: value for key, value in pairs}


_RunLoader.add_constructor("tag:yaml.org,2002:python/object/apply:collections.OrderedDict", _ordered_dict)


def read_run_yaml(path: str | Path) -> dict[str, Any]:
    """Read ``args.yml`` / ``config.yml`` of a run; nothing but plain data is constructed."""
    with open(path) as handle:
        content = yaml.load(handle, Loader=_RunLoader)  # noqa: S506 (a SafeLoader subclass)
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
        """The number rl_zoo3 gave the run."""
        return int(self.path.name.rsplit("_", 1)[-1])

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
        """The :class:`~delayzoo.zoo.envs.DelaySettings` recorded in ``args.yml`` (none for plain rl_zoo3 runs)."""
        if self.args.get("delay") is None:
            return DelaySettings()
        return DelaySettings(
            delay=self.args["delay"],
            process=self.args.get("delay_process", "constant"),
            p=self.args.get("delay_p"),
            min_delay=self.args.get("min_delay"),
            pending_view=bool(self.args.get("pending_view", False)),
            init_action=self.args.get("init_action", "noop"),
        )

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
        if not path.is_dir() or not path.name.rsplit("_", 1)[-1].isdigit():
            continue
        run = _load_run(path)
        if run is None or (algos and run.algo not in algos) or (env_ids and run.env_id not in env_ids):
            continue
        runs.append(run)
    return sorted(runs, key=lambda run: (run.algo, run.env_id, run.run_id))


def select_run(log_folder: str | Path, algo: str, env_id: str, exp_id: int = 0) -> Run:
    """The run ``exp_id`` of ``algo`` on ``env_id`` (0: the latest), or a :class:`ZooError` listing those there are."""
    runs = find_runs(log_folder, [algo], [env_id])
    if not runs:
        raise ZooError(f"no run of --algo {algo} --env {env_id} under {str(log_folder)!r}")
    if exp_id == 0:
        return runs[-1]
    for run in runs:
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
