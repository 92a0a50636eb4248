"""Where the zoo's hyperparameter files are, and which entry of a file a run uses.

The files are ``hyperparams/<algo>.yml`` at the root of the repository (rl_zoo3's format: one entry per
env id). They are found in this order: the folder named by the ``DELAYZOO_HYPERPARAMS`` environment
variable, then ``hyperparams/`` next to the ``delayzoo`` package (a source checkout or
``pip install -e .``). Any other file can be given with ``-conf FILE.yml`` (YAML only: unlike rl_zoo3,
the zoo does not run Python configuration files).

An entry is chosen by, in order: ``<env id>@<preset>`` when ``--preset`` is given (and nothing else);
``dm_control_pixels`` for ``dm_control/`` ids with ``--pixels``; the env id itself; ``atari`` for ALE
ids or ``dm_control`` for ``dm_control/`` ids; ``default``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from delayzoo.zoo.errors import ZooError

__all__ = ["hyperparams_dir", "hyperparams_file", "load_hyperparams_file", "select_entry"]

ENV_VARIABLE = "DELAYZOO_HYPERPARAMS"


def hyperparams_dir() -> Path:
    """The folder of the hyperparameter files (see the module docstring)."""
    if os.environ.get(ENV_VARIABLE):
        return Path(os.environ[ENV_VARIABLE])
    return Path(__file__).resolve().parents[2] / "hyperparams"


def hyperparams_file(algo: str) -> Path:
    """``<hyperparams folder>/<algo>.yml``, or a :class:`ZooError` listing the files there."""
    folder = hyperparams_dir()
    path = folder / f"{algo}.yml"
    if not path.is_file():
        present = sorted(p.stem for p in folder.glob("*.yml")) if folder.is_dir() else []
        raise ZooError(
            f"no hyperparameter file for {algo!r}: {path} does not exist (files there: {present}); "
            f"pass -conf FILE.yml or set {ENV_VARIABLE} to the folder of the YAML files"
        )
    return path


def load_hyperparams_file(path: str | Path) -> dict[str, dict[str, Any]]:
    """Read a hyperparameter YAML file: a mapping from env ids (and fallbacks) to mappings."""
    path = Path(path)
    if path.suffix not in (".yml", ".yaml"):
        raise ZooError(f"hyperparameter files are YAML (.yml/.yaml), got {str(path)!r}")
    if not path.is_file():
        raise ZooError(f"hyperparameter file {str(path)!r} does not exist")
    try:
        with open(path) as handle:
            content = yaml.safe_load(handle)
    except yaml.YAMLError as error:
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise ZooError(f"{path} is not plain YAML data ({first}); the zoo reads no Python tags") from None
    if not isinstance(content, dict) or not all(isinstance(entry, dict) for entry in content.values()):
        raise ZooError(f"{path} must map env ids to mappings of hyperparameters")
    return content


def select_entry(
    content: dict[str, dict[str, Any]], env_id: str, kind: str, preset: str | None = None, pixels: bool = False
) -> tuple[str, dict[str, Any]]:
    """The key and a copy of the entry a run of ``env_id`` uses (see the module docstring for the order).

    :param content: the file, as :func:`load_hyperparams_file` reads it
    :param env_id: the env id of the run
    :param kind: ``"atari"``, ``"dmc"`` or ``"gym"`` (:func:`delayzoo.zoo.envs.env_kind`)
    :param preset: the ``--preset`` name, or ``None``
    :param pixels: ``--pixels`` was given
    :raise ZooError: when no entry applies
    """
    if preset is not None:
        key = f"{env_id}@{preset}"
        if key not in content:
            presets = sorted(name.split("@", 1)[1] for name in content if name.startswith(f"{env_id}@"))
            raise ZooError(f"no preset {preset!r} for {env_id!r} (key {key!r}); presets for this env: {presets}")
        return key, dict(content[key])
    if pixels:
        candidates = ["dm_control_pixels", "default"]
    else:
        candidates = [env_id, *{"atari": ["atari"], "dmc": ["dm_control"]}.get(kind, []), "default"]
    for key in candidates:
        if key in content:
            return key, dict(content[key])
    raise ZooError(
        f"no hyperparameters for {env_id!r}: none of the keys {candidates} is in the file (keys: {sorted(content)})"
    )
