"""Where the zoo's hyperparameter files are, and which entry of which file a run uses.

Our files are ``delayzoo/hyperparams/<algo>.yml`` inside the package (rl_zoo3's format: one entry per
env id), so every install finds them; the ``DELAYZOO_HYPERPARAMS`` environment variable names another
folder to use instead. rl_zoo3's own files (``rl_zoo3/hyperparams/<algo>.yml``) fill in for what ours
do not cover, so every rl_zoo3 algorithm and env runs without ``-conf``. Any other file can be given
with ``-conf``, then only that file is read: a YAML file (``FILE.yml``), or, as in rl_zoo3, a Python file
(``FILE.py``) or module (``package.module``) whose ``hyperparams`` mapping holds the entries. A Python
file is code the user runs by naming it, like a script, so its entries are trusted as they are
(the ``python`` field of :class:`HyperparamsEntry`); YAML entries are checked (:mod:`delayzoo.zoo.trust`).

An entry is chosen by, in order:

1. ``<env id>@<preset>`` in our file when ``--preset`` is given (and nothing else);
2. with ``--pixels`` (``dm_control/`` ids): ``dm_control_pixels``, then ``default``, in our file;
3. otherwise: the env id in our file, the env id in rl_zoo3's file, ``atari`` (ALE ids) or
   ``dm_control`` (``dm_control/`` ids) in our file, ``default`` in our file, then rl_zoo3's
   ``atari`` (ALE ids) and ``default``.

rl_zoo3's ``atari`` entries wrap a raw ALE env in SB3's ``AtariWrapper``; the zoo makes ALE envs with
:func:`~delayzoo.wrappers.atari.make_atari`, which already skips frames, resizes and reports life
losses, so that wrapper is dropped from them (their ``frame_stack`` and the rest are kept).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import runpy
from pathlib import Path
from typing import Any

import yaml

from delayzoo.zoo.errors import ZooError

__all__ = [
    "HyperparamsEntry",
    "find_entry",
    "hyperparams_dir",
    "hyperparams_file",
    "load_config",
    "load_hyperparams_file",
    "rl_zoo3_hyperparams_dir",
    "select_entry",
]

ENV_VARIABLE = "DELAYZOO_HYPERPARAMS"
ATARI_WRAPPER = "stable_baselines3.common.atari_wrappers.AtariWrapper"
_FALLBACKS = {"atari": ("atari",), "dmc": ("dm_control",)}
_YAML = (".yml", ".yaml")


def hyperparams_dir() -> Path:
    """The folder of our hyperparameter files (see the module docstring)."""
    if os.environ.get(ENV_VARIABLE):
        return Path(os.environ[ENV_VARIABLE])
    return Path(__file__).resolve().parents[1] / "hyperparams"


def rl_zoo3_hyperparams_dir() -> Path:
    """The folder of the hyperparameter files rl_zoo3 ships (found without importing rl_zoo3)."""
    spec = importlib.util.find_spec("rl_zoo3")
    if spec is None or spec.origin is None:
        raise ZooError("rl_zoo3 is not installed: pip install rl_zoo3")
    return Path(spec.origin).parent / "hyperparams"


def hyperparams_file(algo: str) -> Path:
    """``<our hyperparams folder>/<algo>.yml``, or a :class:`ZooError` listing the files there."""
    folder = hyperparams_dir()
    path = folder / f"{algo}.yml"
    if not path.is_file():
        present = sorted(p.stem for p in folder.glob("*.yml")) if folder.is_dir() else []
        raise ZooError(
            f"no hyperparameter file for {algo!r}: {path} does not exist (files there: {present}); "
            f"pass -conf FILE.yml or set {ENV_VARIABLE} to the folder of the YAML files"
        )
    return path


@dataclasses.dataclass(frozen=True)
class HyperparamsEntry:
    """The entry a run uses.

    :param path: the YAML file it comes from
    :param key: its key in that file (an env id, ``"<env id>@<preset>"``, ``"atari"``, ``"default"``, ...)
    :param hyperparams: a copy of the entry
    :param python: it comes from a Python file or module the user named with ``-conf`` (trusted as code they run)
    """

    path: Path
    key: str
    hyperparams: dict[str, Any]
    python: bool = False


def find_entry(
    algo: str, env_id: str, kind: str, preset: str | None = None, pixels: bool = False, config: str | None = None
) -> HyperparamsEntry:
    """The entry of a run of ``algo`` on ``env_id``, from ``config`` or from our files and rl_zoo3's.

    :param algo: the algorithm name (the file is ``<algo>.yml``)
    :param env_id: the env id of the run
    :param kind: ``"atari"``, ``"dmc"`` or ``"gym"`` (:func:`delayzoo.zoo.envs.env_kind`)
    :param preset: the ``--preset`` name, or ``None``
    :param pixels: ``--pixels`` was given
    :param config: the ``-conf`` file, or ``None`` for our files and rl_zoo3's (see the module docstring)
    :raise ZooError: when no entry applies
    """
    if config:
        key, hyperparams = select_entry(load_config(config), env_id, kind, preset, pixels)
        return HyperparamsEntry(Path(config), key, hyperparams, python=not config.endswith(_YAML))
    ours_path, theirs_path = hyperparams_dir() / f"{algo}.yml", rl_zoo3_hyperparams_dir() / f"{algo}.yml"
    ours = load_hyperparams_file(ours_path) if ours_path.is_file() else {}
    theirs = load_hyperparams_file(theirs_path) if theirs_path.is_file() and ours_path != theirs_path else {}
    if preset is not None or pixels:
        if not ours and preset is not None:
            hyperparams_file(algo)  # raises, listing our files
        key, hyperparams = select_entry(ours, env_id, kind, preset, pixels)
        return HyperparamsEntry(ours_path, key, hyperparams)
    candidates = [(ours, ours_path, env_id), (theirs, theirs_path, env_id)]
    candidates += [(ours, ours_path, key) for key in (*_FALLBACKS.get(kind, ()), "default")]
    candidates += [(theirs, theirs_path, key) for key in (("atari", "default") if kind == "atari" else ("default",))]
    for content, path, key in candidates:
        if key in content:
            hyperparams = dict(content[key])
            if path == theirs_path and kind == "atari":
                hyperparams = _without_atari_wrapper(hyperparams)
            return HyperparamsEntry(path, key, hyperparams)
    tried = sorted({f"{path}:{key}" for _, path, key in candidates})
    raise ZooError(f"no hyperparameters for --algo {algo} --env {env_id}: none of {tried} exists; pass -conf FILE.yml")


def _without_atari_wrapper(hyperparams: dict[str, Any]) -> dict[str, Any]:
    """An rl_zoo3 entry without SB3's ``AtariWrapper`` (``make_atari`` plays its part)."""
    wrappers = hyperparams.get("env_wrapper")
    if wrappers is None:
        return hyperparams
    kept = [w for w in (wrappers if isinstance(wrappers, list) else [wrappers]) if _wrapper_name(w) != ATARI_WRAPPER]
    if kept:
        hyperparams["env_wrapper"] = kept
    else:
        del hyperparams["env_wrapper"]
    return hyperparams


def _wrapper_name(wrapper: Any) -> Any:
    return next(iter(wrapper)) if isinstance(wrapper, dict) and len(wrapper) == 1 else wrapper


def load_config(config: str) -> dict[str, dict[str, Any]]:
    """The entries of a ``-conf`` argument, read as rl_zoo3 reads it: a YAML file (``.yml``/``.yaml``, see
    :func:`load_hyperparams_file`), a Python file (``.py``, run) or a module name (imported), whose
    ``hyperparams`` mapping holds the entries.

    :raise ZooError: for a file that does not exist, a Python file or module that fails or has no
        ``hyperparams`` mapping of mappings
    """
    if config.endswith(_YAML):
        return load_hyperparams_file(config)
    try:
        if config.endswith(".py"):
            if not Path(config).is_file():
                raise ZooError(f"hyperparameter file {config!r} does not exist")
            content = runpy.run_path(config).get("hyperparams")
        else:
            content = getattr(importlib.import_module(config), "hyperparams", None)
    except ZooError:
        raise
    except Exception as error:
        kind = "file" if config.endswith(".py") else "module"
        raise ZooError(
            f"-conf {config!r}: the Python {kind} fails ({type(error).__name__}: {error}); -conf takes a YAML file "
            "(.yml/.yaml), a Python file (.py) or a module (package.module) defining hyperparams"
        ) from None
    if not isinstance(content, dict) or not all(isinstance(entry, dict) for entry in content.values()):
        raise ZooError(
            f"-conf {config!r} must define hyperparams, a mapping from env ids to mappings of hyperparameters"
        )
    return content


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
    """The key and a copy of the entry of one file a run of ``env_id`` uses (steps 1-3 of the module
    docstring, within that file).

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
        candidates = [env_id, *_FALLBACKS.get(kind, ()), "default"]
    for key in candidates:
        if key in content:
            return key, dict(content[key])
    raise ZooError(
        f"no hyperparameters for {env_id!r}: none of the keys {candidates} is in the file (keys: {sorted(content)})"
    )
