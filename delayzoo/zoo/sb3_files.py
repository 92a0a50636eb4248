"""Stable-Baselines3 model files loaded without unpickling: every pickled entry is replaced, none is read.

SB3 stores what JSON cannot hold (spaces, the policy class, schedules, buffer classes, ``policy_kwargs``
holding classes) as cloudpickled entries of the archive's ``data``; loading them can run code. The zoo
passes a replacement for each such entry as SB3's ``custom_objects`` (which SB3 uses instead of
unpickling): the spaces of the env the model is loaded for, the policy class named by the run's alias,
the ``policy_kwargs`` of the hyperparameters (parsed, not evaluated) over the saved ones (classes such as
A2C's RMSprop optimiser are read back from their names, under :data:`_CLASS_PREFIXES` only), and
constructor defaults for the rest, which the hyperparameters then override as rl_zoo3 does. Schedules
the model rebuilds when it is set up, and the training state SB3 resets on loading (last observations,
episode statistics), are left empty. A pickled entry the zoo cannot replace is refused.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import zipfile
from pathlib import Path
from typing import Any

import torch
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv

from delayzoo.agents.common.plain_save import MAX_DATA_BYTES
from delayzoo.zoo.errors import ZooError

__all__ = ["load_sb3_model", "pickled_entries"]

_PICKLE_MARK = ":serialized:"
_REBUILT = ("lr_schedule", "exploration_schedule")
"""Entries that ``_setup_model`` computes again from the hyperparameters."""
_RUNTIME = ("_last_obs", "_last_episode_starts", "_last_original_obs", "ep_info_buffer", "ep_success_buffer")
"""Training state that SB3 resets when a model is loaded for an env (and rebuilds when learning starts)."""


_CLASS_NAME = re.compile(r"^<class '([A-Za-z_][\w.]*)'>$")
_CLASS_PREFIXES = ("torch.optim.", "torch.nn.", "stable_baselines3.", "sb3_contrib.")
"""Modules whose classes a saved ``policy_kwargs`` may name (optimisers, activations, feature extractors)."""


def _saved_class(text: str) -> type | None:
    """The class SB3 wrote as ``"<class 'module.Name'>"`` beside a pickled entry, if it is under
    :data:`_CLASS_PREFIXES`; ``None`` otherwise (the entry is then dropped)."""
    match = _CLASS_NAME.match(text)
    if match is None or not match.group(1).startswith(_CLASS_PREFIXES):
        return None
    module_name, _, name = match.group(1).rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), name, None)
    except ImportError:
        return None
    return found if isinstance(found, type) else None


def _read_data(path: str | Path) -> dict[str, Any]:
    try:
        with zipfile.ZipFile(path) as archive, archive.open("data") as entry:
            raw = entry.read(MAX_DATA_BYTES + 1)
        if len(raw) > MAX_DATA_BYTES:
            raise ValueError(f"its data entry is larger than {MAX_DATA_BYTES} bytes")
        data = json.loads(raw)
    except (OSError, KeyError, ValueError, RecursionError, zipfile.BadZipFile) as error:
        raise ZooError(f"{path} is not a model saved by Stable-Baselines3 ({error})") from None
    if not isinstance(data, dict):
        raise ZooError(f"{path} is not a model saved by Stable-Baselines3 (its data entry is not a mapping)")
    return data


def pickled_entries(path: str | Path) -> dict[str, dict[str, Any]]:
    """The cloudpickled entries of an SB3 model file, with the plain fields SB3 writes next to each pickle."""
    return {key: value for key, value in _read_data(path).items() if isinstance(value, dict) and _PICKLE_MARK in value}


def load_sb3_model(
    algorithm: type[BaseAlgorithm],
    path: str | Path,
    env: VecEnv,
    policy: str | type,
    policy_kwargs: dict[str, Any] | None,
    device: torch.device | str = "auto",
    **kwargs: Any,
) -> BaseAlgorithm:
    """``algorithm.load(path, env=env, ...)`` with a replacement for every pickled entry (see the module docstring).

    :param algorithm: a Stable-Baselines3 / sb3-contrib algorithm class
    :param path: the model file
    :param env: the env the model is loaded for (its spaces replace the saved ones)
    :param policy: the policy alias of the run (``"MlpPolicy"``, ...) or a policy class
    :param policy_kwargs: the run's ``policy_kwargs`` (already parsed)
    :param device: torch device
    :param kwargs: attributes set on the loaded model (rl_zoo3 passes the hyperparameters)
    :raise ZooError: for a file that is not an SB3 model, or a pickled entry the zoo cannot replace
    """
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(algorithm.__init__).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }
    if isinstance(policy, str):
        if policy not in algorithm.policy_aliases:
            raise ZooError(f"{path}: policy {policy!r} is not an alias of {algorithm.__name__}")
        policy = algorithm.policy_aliases[policy]
    custom: dict[str, Any] = {}
    for key, entry in pickled_entries(path).items():
        if key == "policy_class":
            custom[key] = policy
        elif key in ("observation_space", "action_space"):
            custom[key] = getattr(env, key)
        elif key == "policy_kwargs":
            plain = {name: value for name, value in entry.items() if not name.startswith(":")}
            for name, value in list(plain.items()):
                if isinstance(value, str) and value.startswith("<"):
                    saved = _saved_class(value)
                    if saved is None:
                        del plain[name]
                    else:
                        plain[name] = saved
            custom[key] = {**plain, **(policy_kwargs or {})}
        elif key in _REBUILT or key in _RUNTIME:
            custom[key] = None
        elif key in defaults:
            custom[key] = kwargs.get(key, defaults[key])
        else:
            raise ZooError(
                f"{path} holds a pickled {key!r} the zoo cannot replace; pass --trust-run-files if you trust this file"
            )
    try:
        return algorithm.load(str(path), env=env, device=device, custom_objects=custom, **kwargs)
    except (ValueError, KeyError, TypeError, RuntimeError) as error:
        raise ZooError(f"{path} does not load without its pickled entries ({type(error).__name__}: {error})") from None
