"""What the zoo runs from files: names under an allow-list, plain values, nothing else.

rl_zoo3 imports any dotted name a hyperparameter file or a run's ``config.yml`` gives
(``env_wrapper``, ``vec_env_wrapper``, ``callback``, ``policy``, ``replay_buffer_class``) and ``eval``s
its ``policy_kwargs``-style strings, so a shared YAML file or run folder could run code. The zoo
instead:

- resolves those names only under :data:`TRUSTED_PREFIXES`, and only to classes of the expected kind
  (a ``gymnasium.Wrapper``, a ``VecEnvWrapper``, a ``BaseCallback``, a ``BasePolicy``, a replay buffer);
- reads ``policy_kwargs``, ``replay_buffer_kwargs``, ``monitor_kwargs`` and ``normalize`` strings with
  :func:`parse_kwargs`, which accepts rl_zoo3's forms (``dict(...)``, ``{...}``, lists, tuples, numbers,
  strings, ``True``/``False``/``None``, ``nn.*`` / ``th.nn.*`` / ``torch.nn.*`` and ``th.optim.*`` /
  ``torch.optim.*`` classes, ``RMSpropTFLike``, and delayzoo's own classes by their full name, such as
  ``delayzoo.agents.common.extractors.SmallCNN``) and nothing else.

``--trust-run-files`` lifts both rules (rl_zoo3's own behaviour: any name is imported, strings are
evaluated as Python), for files you wrote yourself. What the user types is not checked: values given
with ``-params`` on the command line (rl_zoo3 evaluates them as Python when it parses them) and the
entries of a Python ``-conf`` file or module, which the user names to run it, like a script.
"""

from __future__ import annotations

import ast
import importlib
from typing import Any, cast

import gymnasium as gym
import torch
from stable_baselines3.common.buffers import BaseBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.sb2_compat.rmsprop_tf_like import RMSpropTFLike
from stable_baselines3.common.vec_env import VecEnvWrapper

from delayzoo.zoo.errors import ZooError

__all__ = [
    "KWARGS_KEYS",
    "NAME_KEYS",
    "TRUSTED_PREFIXES",
    "ZOO_KWARGS_KEYS",
    "check_names",
    "parse_kwargs",
    "resolve_name",
    "safe_hyperparams",
]

TRUSTED_PREFIXES = (
    "delayzoo.",
    "gymnasium.wrappers.",
    "stable_baselines3.",
    "sb3_contrib.",
    "rl_zoo3.wrappers.",
    "rl_zoo3.callbacks.",
)
"""The packages whose classes a file may name without ``--trust-run-files``."""

NAME_KEYS: dict[str, type] = {
    "env_wrapper": gym.Wrapper,
    "vec_env_wrapper": VecEnvWrapper,
    "callback": BaseCallback,
}
"""Hyperparameters holding class names (one, a list, or a list of ``{name: kwargs}``), with the kind each must be."""

ZOO_KWARGS_KEYS = ("search_kwargs", "actor_kwargs")
"""Keyword-string hyperparameters of delayzoo's agents, which rl_zoo3 does not evaluate: parsed by
:func:`parse_kwargs` with or without ``--trust-run-files``."""

KWARGS_KEYS = ("policy_kwargs", "replay_buffer_kwargs", "monitor_kwargs", "normalize", *ZOO_KWARGS_KEYS)
"""Hyperparameters whose string values rl_zoo3 evaluates as Python (and :data:`ZOO_KWARGS_KEYS`); the zoo parses
them with :func:`parse_kwargs`."""

_TORCH_MODULES = {
    "nn": torch.nn,
    "th.nn": torch.nn,
    "torch.nn": torch.nn,
    "th.optim": torch.optim,
    "torch.optim": torch.optim,
}
_BARE_NAMES: dict[str, type] = {"RMSpropTFLike": RMSpropTFLike}
_FORMS = (
    "dict(...), {...}, lists, tuples, numbers, strings, True/False/None, nn.* / th.nn.* / torch.nn.* and "
    "th.optim.* / torch.optim.* classes, RMSpropTFLike, delayzoo.* classes"
)


def resolve_name(name: Any, kind: type, what: str, trusted: bool = False) -> type:
    """Import the class ``name`` (``"package.module.Class"``) if it is allowed and of the expected kind.

    :param name: the dotted name from the file
    :param kind: the base class it must derive from
    :param what: where the name comes from, for messages (``"env_wrapper in config.yml"``)
    :param trusted: ``--trust-run-files``: any module may be imported
    :raise ZooError: for a name outside :data:`TRUSTED_PREFIXES` (untrusted), one that does not import,
        or an object that is not a subclass of ``kind``
    """
    if not isinstance(name, str) or "." not in name:
        raise ZooError(f"{what}: {name!r} is not a dotted class name (package.module.Class)")
    if not trusted and not name.startswith(TRUSTED_PREFIXES):
        raise ZooError(
            f"{what}: {name!r} is outside the packages the zoo imports from files "
            f"({', '.join(TRUSTED_PREFIXES)}); pass --trust-run-files if you trust this file"
        )
    module_name, _, attribute = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ZooError(f"{what}: cannot import {name!r} ({error})") from None
    if not (isinstance(found, type) and issubclass(found, kind)):
        raise ZooError(f"{what}: {name!r} is not a {kind.__name__} class")
    return found


def _entry_names(entry: Any) -> list[Any]:
    """The class names of an rl_zoo3 wrapper/callback entry: a name, a list of names or of ``{name: kwargs}``."""
    items = entry if isinstance(entry, list) else [entry]
    names = []
    for item in items:
        if isinstance(item, dict):
            if len(item) != 1:
                raise ZooError(f"each entry must be a name or {{name: keywords}}, got {item!r}")
            names.append(next(iter(item)))
        else:
            names.append(item)
    return names


def check_names(hyperparams: dict[str, Any], source: str, trusted: bool = False) -> None:
    """Check every class name in ``env_wrapper``, ``vec_env_wrapper`` and ``callback`` (see :func:`resolve_name`)."""
    for key, kind in NAME_KEYS.items():
        if hyperparams.get(key) is None:
            continue
        for name in _entry_names(hyperparams[key]):
            resolve_name(name, kind, f"{key} in {source}", trusted)


def parse_kwargs(text: str, what: str) -> Any:
    """The value of an rl_zoo3 keyword string such as ``"dict(net_arch=[64, 64], activation_fn=nn.Tanh)"``.

    Only the forms rl_zoo3's files use are accepted (see the module docstring); nothing is evaluated.

    :param text: the string from the file
    :param what: where it comes from, for messages
    :raise ZooError: for anything else (a call other than ``dict``, another name, an operator, ...)
    """
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _value(tree.body, text)
    except SyntaxError as error:
        raise ZooError(f"{what}: {text!r} is not valid ({error.msg}); allowed: {_FORMS}") from None
    except RecursionError:
        raise ZooError(f"{what}: {text[:80]!r}... is nested too deeply") from None
    except _Refused as refused:
        raise ZooError(
            f"{what}: {refused.args[0]!r} is not allowed in {text!r}; allowed: {_FORMS} "
            "(pass --trust-run-files to evaluate it as Python)"
        ) from None


class _Refused(Exception):
    """A part of a keyword string that :func:`parse_kwargs` does not accept (its source text)."""


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def _value(node: ast.expr, text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, (ast.USub, ast.UAdd))
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) in (int, float)
    ):
        number = cast("int | float", node.operand.value)
        return -number if isinstance(node.op, ast.USub) else number
    if isinstance(node, ast.List):
        return [_value(item, text) for item in node.elts]
    if isinstance(node, ast.Tuple):
        return tuple(_value(item, text) for item in node.elts)
    if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
        return {_value(key, text): _value(value, text) for key, value in zip(node.keys, node.values)}  # type: ignore[arg-type]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "dict"
        and not node.args
        and all(keyword.arg is not None for keyword in node.keywords)
    ):
        return {keyword.arg: _value(keyword.value, text) for keyword in node.keywords}
    name = _dotted(node)
    if name in _BARE_NAMES:
        return _BARE_NAMES[name]
    if name is not None and "." in name:
        module_name, _, attribute = name.rpartition(".")
        module = _TORCH_MODULES.get(module_name)
        found = getattr(module, attribute, None) if module is not None and not attribute.startswith("_") else None
        if isinstance(found, type):
            return found
        if name.startswith("delayzoo."):
            try:
                found = getattr(importlib.import_module(module_name), attribute)
            except (ImportError, AttributeError):
                found = None
            if isinstance(found, type):
                return found
    raise _Refused(ast.get_source_segment(text.strip(), node) or ast.dump(node))


def safe_hyperparams(hyperparams: dict[str, Any], source: str, trusted: bool = False) -> dict[str, Any]:
    """A copy of a hyperparameter entry in which nothing left for rl_zoo3 runs code from the file.

    Keyword strings (:data:`KWARGS_KEYS`) become values (:func:`parse_kwargs`), class names are checked
    (:func:`check_names`, a dotted ``policy`` name, and ``replay_buffer_class``, which is resolved). With ``trusted``
    only :data:`ZOO_KWARGS_KEYS` are parsed: rl_zoo3 imports and evaluates the rest as it always does.

    :param hyperparams: the entry (after the command line's ``-params``)
    :param source: the file it comes from, for messages
    :param trusted: ``--trust-run-files``
    """
    keys = ZOO_KWARGS_KEYS if trusted else KWARGS_KEYS
    safe = dict(hyperparams)
    for key in keys:
        if isinstance(safe.get(key), str):
            safe[key] = parse_kwargs(safe[key], f"{key} in {source}")
    if trusted:
        return safe
    check_names(safe, source)
    if isinstance(safe.get("policy"), str) and "." in safe["policy"]:  # rl_zoo3 imports it once checked
        resolve_name(safe["policy"], BasePolicy, f"policy in {source}")
    if isinstance(safe.get("replay_buffer_class"), str):
        name = safe["replay_buffer_class"]
        if "." not in name:
            name = (
                f"stable_baselines3.{name}"
                if name in ("HerReplayBuffer",)
                else f"stable_baselines3.common.buffers.{name}"
            )
        safe["replay_buffer_class"] = resolve_name(name, BaseBuffer, f"replay_buffer_class in {source}")
    return safe
