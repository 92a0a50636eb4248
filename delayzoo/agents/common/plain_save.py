"""Model files that load without running code from them.

SB3's zip archive stores tensors as ``.pth`` entries (read with ``weights_only=True``) and everything
else in a JSON ``data`` entry, where objects JSON cannot hold (spaces, schedules, classes) are
cloudpickled, so loading them can run code. Here the agents write only plain values there (spaces
through :func:`space_to_json`) and read it back with :func:`load_plain_zip`, which refuses pickled
entries; :class:`PlainSaveMixin` gives them ``save`` and ``load`` in that format.

Loading trusts nothing in the file: the ``data`` entry is read up to :data:`MAX_DATA_BYTES`, must have
exactly the keys ``save`` writes with their types, sets only the counters ``save`` writes (integers),
passes the constructor keywords through the constructor's own range checks, and reads tensors with
``weights_only=True``. Anything else is a ``ValueError`` starting with ``"not a delayzoo model file: "``.
"""

from __future__ import annotations

import errno
import inspect
import io
import json
import os
import pathlib
import warnings
import zipfile
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.save_util import load_from_zip_file, open_path, save_to_zip_file
from stable_baselines3.common.type_aliases import GymEnv, TrainFreq
from stable_baselines3.common.utils import check_for_correct_spaces, get_device
from stable_baselines3.common.vec_env import VecEnv

from delayzoo.agents.common.checks import check_device

_PICKLE_MARK = ":serialized:"
_NOT_SAVED = ("self", "policy", "env", "device", "policy_kwargs", "_init_setup_model")
_DATA_KEYS = {"format", "policy", "init", "policy_kwargs", "observation_space", "action_space", "counters"}

_SETTINGS_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RuntimeError)
MAX_DATA_BYTES = 4 * 1024 * 1024
"""The largest ``data`` entry :func:`load_plain_zip` reads (ours are a few kilobytes)."""


class NotAModelFileError(ValueError):
    """A file that :meth:`PlainSaveMixin.load` refuses; the message starts with ``"not a delayzoo model file: "``."""

    def __init__(self, path: Any, reason: str) -> None:
        where = path if isinstance(path, (str, pathlib.Path)) else "<stream>"
        super().__init__(f"not a delayzoo model file: {where}: {reason}")

class UnsuitableEnvError(ValueError):
    """An env an agent cannot train on, raised by its constructor, ``set_env`` and ``load``; the message names
    the env, because the model (or the file) is fine: only this env is refused."""

    def __init__(self, env: Any, reason: str) -> None:
        super().__init__(f"the env {describe_env(env)} is refused: {reason}")


def describe_env(env: Any) -> str:
    """A short name of an env for messages: its wrapper chain (``<ObservationDelay<TimeLimit<...>>>``)."""
    envs = getattr(env, "envs", None)
    if envs:
        inner = str(envs[0])
        return inner if len(envs) == 1 else f"{type(env).__name__} of {len(envs)} envs like {inner}"
    if hasattr(env, "num_envs") and not hasattr(env, "unwrapped"):
        return f"{type(env).__name__} of {env.num_envs} envs"
    return str(env)


SelfPlainSave = TypeVar("SelfPlainSave", bound="PlainSaveMixin")


def space_to_json(space: spaces.Space) -> dict[str, Any]:
    """Describe a ``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` or ``Dict`` space as plain data."""

    def bound(values: np.ndarray) -> Any:
        flat = values.flatten()
        return flat[0].item() if np.all(flat == flat[0]) else values.tolist()

    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": bound(space.low),
            "high": bound(space.high),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist()}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "spaces": {key: space_to_json(sub) for key, sub in space.spaces.items()}}
    raise TypeError(f"Cannot describe the space {space} as plain data")


MAX_SPACE_SIZE = 2**24
"""The most elements a space read by :func:`space_from_json` may have (a 1024x1024x16 image)."""


def _shape(value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(n) is int and n >= 0 for n in value):
        raise ValueError(f"a space shape must be a list of integers >= 0, got {value!r}")
    if int(np.prod(value, dtype=np.float64)) > MAX_SPACE_SIZE:
        raise ValueError(f"a space of shape {value} is larger than {MAX_SPACE_SIZE} elements")
    return tuple(value)


def space_from_json(data: dict[str, Any]) -> spaces.Space:
    """Inverse of :func:`space_to_json` (refuses anything :func:`space_to_json` does not write)."""
    if not isinstance(data, dict):
        raise ValueError(f"a space description must be a mapping, got {data!r}")
    kind = data.get("type")
    if kind == "Box":
        dtype, shape = np.dtype(str(data["dtype"])), _shape(data["shape"])
        if dtype.kind not in "biuf":
            raise ValueError(f"a Box space must have a numeric dtype, got {dtype}")
        low = np.broadcast_to(np.asarray(data["low"], dtype=dtype), shape).copy()
        high = np.broadcast_to(np.asarray(data["high"], dtype=dtype), shape).copy()
        return spaces.Box(low, high, shape=shape, dtype=dtype)
    if kind == "Discrete":
        if type(data["n"]) is not int or type(data["start"]) is not int or data["n"] < 1:
            raise ValueError(f"a Discrete space needs integers n >= 1 and start, got {data!r}")
        return spaces.Discrete(data["n"], start=data["start"])
    if kind == "MultiDiscrete":
        nvec = np.asarray(data["nvec"], dtype=np.int64)
        _shape(list(nvec.shape))
        return spaces.MultiDiscrete(nvec, start=np.asarray(data["start"], dtype=np.int64))
    if kind == "MultiBinary":
        n = data["n"]
        shape = _shape(n if isinstance(n, list) else [n])
        return spaces.MultiBinary(list(shape) if isinstance(n, list) else shape[0])
    if kind == "Dict":
        if not isinstance(data["spaces"], dict):
            raise ValueError("a Dict space description needs a mapping of spaces")
        return spaces.Dict({key: space_from_json(sub) for key, sub in data["spaces"].items()})
    raise ValueError(f"Unknown space description {data!r}")


def _reject_pickles(value: Any, where: str) -> None:
    if isinstance(value, dict):
        if _PICKLE_MARK in value:
            raise ValueError(f"{where} holds a pickled object; refusing to load it")
        for key, item in value.items():
            _reject_pickles(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_pickles(item, f"{where}[{index}]")


def load_plain_zip(
    path: str | pathlib.Path | io.BufferedIOBase, device: torch.device | str = "auto", print_system_info: bool = False
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """Read an SB3 zip archive without unpickling: ``(data, params, pytorch_variables)``.

    :param path: the archive (``.zip`` is appended when the path does not exist, as SB3 does).
    :raise FileNotFoundError: naming the path given, when neither it nor it with ``.zip`` exists.
    :param device: where to put the tensors.
    :param print_system_info: print the system info stored at save time.
    """
    if isinstance(path, (str, pathlib.Path)) and not (os.path.exists(path) or os.path.exists(f"{path}.zip")):
        tried = "" if str(path).endswith(".zip") else f" (nor {path}.zip)"
        raise FileNotFoundError(errno.ENOENT, f"No such file or directory{tried}", str(path))
    file = open_path(path, "r", suffix="zip")
    try:
        with zipfile.ZipFile(file) as archive:
            if "data" not in archive.namelist():
                raise NotAModelFileError(path, "it has no 'data' entry")
            with archive.open("data") as entry:
                raw = entry.read(MAX_DATA_BYTES + 1)
            if len(raw) > MAX_DATA_BYTES:
                raise NotAModelFileError(path, f"its 'data' entry is larger than {MAX_DATA_BYTES} bytes")
            data = json.loads(raw.decode())
    except zipfile.BadZipFile as error:
        raise NotAModelFileError(path, "it is not a zip archive") from error
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise NotAModelFileError(path, f"its 'data' entry is not JSON ({type(error).__name__})") from None
    finally:
        if isinstance(path, (str, pathlib.Path)):
            file.close()
    try:
        _reject_pickles(data, "data")
    except ValueError as error:
        raise NotAModelFileError(path, str(error)) from None
    if isinstance(path, io.BufferedIOBase):
        path.seek(0)
    try:
        _, params, pytorch_variables = load_from_zip_file(
            path, load_data=False, device=device, print_system_info=print_system_info
        )
    except Exception as error:  # torch's own message would suggest weights_only=False
        raise NotAModelFileError(path, f"its tensor entries are not plain tensors ({type(error).__name__})") from None
    return data, params, pytorch_variables


def _optimizer_name(optimizer_class: type[torch.optim.Optimizer]) -> str:
    """The name of an optimizer of :mod:`torch.optim` (the only ones a model file can name)."""
    if getattr(torch.optim, optimizer_class.__name__, None) is not optimizer_class:
        raise ValueError(
            f"only optimizers of torch.optim can be saved, got {optimizer_class!r}; "
            "pass it with custom_objects={'policy_kwargs': ...} when loading"
        )
    return optimizer_class.__name__


def _optimizer_from_name(name: str) -> type[torch.optim.Optimizer]:
    optimizer_class = getattr(torch.optim, name, None)
    if not (isinstance(optimizer_class, type) and issubclass(optimizer_class, torch.optim.Optimizer)):
        raise ValueError(f"{name!r} is not an optimizer of torch.optim")
    return optimizer_class


class PlainSaveMixin(BaseAlgorithm):
    """``save`` and ``load`` through an SB3 zip archive whose ``data`` entry is plain JSON.

    Put it before the SB3 base class: ``class Agent(PlainSaveMixin, OffPolicyAlgorithm)``. The
    ``data`` entry is ``{"format": "delayzoo.<Class>/1", "policy": alias, "init": {...},
    "policy_kwargs": {...}, "observation_space": ..., "action_space": ..., "counters": {...}}``:
    ``init`` holds every constructor keyword but ``policy``, ``env``, ``device``, ``policy_kwargs`` and
    ``_init_setup_model``, read from the attribute of that name (or with a leading underscore) and
    encoded by :meth:`_init_to_json`; an ``optimizer_class`` in ``policy_kwargs`` is stored by its
    name in :mod:`torch.optim`. The constructor and ``load`` refuse a CUDA ``device`` that torch does not see
    (:func:`~delayzoo.agents.common.checks.check_device`), where SB3 would fall back to the CPU.
    """

    saved_counters: ClassVar[tuple[str, ...]] = ("num_timesteps", "_n_updates", "_episode_num", "n_envs")
    """Attributes restored after loading (``n_envs`` only when no env is given); integers >= 0."""

    run_settings: ClassVar[tuple[str, ...]] = ()
    """Constructor keywords that say how a run is executed (e.g. on which workers), not what the model is:
    not saved, so a loaded model runs with their defaults unless they are passed to ``load`` again."""

    def __init__(self, policy: str | type[BasePolicy], *args: Any, **kwargs: Any) -> None:
        check_device(kwargs.get("device", "auto"))
        self._policy_alias = policy if isinstance(policy, str) else None
        super().__init__(policy, *args, **kwargs)

    def _check_env(self, env: VecEnv) -> None:
        """Raise :class:`UnsuitableEnvError` for an env this agent cannot train on (its settings as they are).

        The one check of an env, run by the constructor, :meth:`set_env` and :meth:`load`; an agent
        overrides it (the default accepts every env whose spaces match)."""

    def set_env(self, env: GymEnv, force_reset: bool = True) -> None:
        """SB3's ``set_env``, after :meth:`_check_env`: an env the constructor would refuse is refused here too."""
        wrapped = self._wrap_env(env, self.verbose)
        check_for_correct_spaces(wrapped, self.observation_space, self.action_space)
        self._check_env(wrapped)
        super().set_env(wrapped, force_reset)

    def _policy_name(self) -> str:
        """The alias the model was made with (or, for a policy class, its alias for this observation space)."""
        aliases = [name for name, value in self.policy_aliases.items() if value is self.policy_class]
        if self._policy_alias in aliases:
            return self._policy_alias
        if not aliases:
            return f"{self.policy_class.__module__}.{self.policy_class.__qualname__}"
        return _alias_for_space(aliases, self.observation_space)

    @classmethod
    def _save_format(cls) -> str:
        return f"delayzoo.{cls.__name__}/1"

    def _init_to_json(self, init: dict[str, Any]) -> dict[str, Any]:
        """Hook: encode constructor keywords JSON cannot hold (inverse: :meth:`_init_from_json`).

        SB3's ``train_freq`` (a ``TrainFreq`` once set up) is stored as ``[frequency, unit]``.
        """
        train_freq = init.get("train_freq")
        if isinstance(train_freq, TrainFreq):
            return {**init, "train_freq": [int(train_freq.frequency), train_freq.unit.value]}
        return init

    @classmethod
    def _init_from_json(cls, init: dict[str, Any]) -> dict[str, Any]:
        """Hook: decode what :meth:`_init_to_json` encoded (``train_freq`` back to a tuple)."""
        if isinstance(init.get("train_freq"), list):
            return {**init, "train_freq": tuple(init["train_freq"])}
        return init

    @classmethod
    def _settings_names(cls) -> list[str]:
        """The constructor keywords saved with a model (all but the policy, env, device, policy_kwargs, the
        :attr:`run_settings` and a ``**`` catch-all)."""
        return [
            name for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name not in _NOT_SAVED and name not in cls.run_settings and parameter.kind != parameter.VAR_KEYWORD
        ]

    @classmethod
    def _without_run_settings(cls, settings: dict[str, Any], where: Any) -> dict[str, Any]:
        """A model file's settings without the :attr:`run_settings` that an earlier version saved under another
        name and :meth:`upgrade_settings` moved there; a warning says how to pass those that were set."""
        result = dict(settings)
        given = {name: result.pop(name) for name in cls.run_settings if name in result}
        given = {
            name: {key: item for key, item in value.items() if item is not None} if isinstance(value, dict) else value
            for name, value in given.items()
        }
        given = {name: value for name, value in given.items() if value not in (None, {})}
        if given:
            keywords = ", ".join(f"{name}={value!r}" for name, value in given.items())
            warnings.warn(
                f"the model file {where} sets {keywords}, now run settings, which a model file does not hold: "
                f"pass {keywords} to load to keep them",
                UserWarning,
                stacklevel=4,
            )
        return result

    @classmethod
    def upgrade_settings(cls, settings: dict[str, Any], where: str) -> dict[str, Any]:
        """Constructor keywords of an earlier version (in a model file, a run's hyperparameters) as this version
        takes them (a hook; ``where`` says where they come from, for the warning an agent may give)."""
        return settings

    def _model_settings(self) -> dict[str, Any]:
        """The constructor keywords that make this model (:meth:`_settings_names`), read from the attributes of
        the same name (or with a leading underscore)."""
        return {
            name: getattr(self, name) if hasattr(self, name) else getattr(self, "_" + name)
            for name in self._settings_names()
        }

    def save(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:  # type: ignore[override]
        """Save the settings as plain JSON, the weights and the optimizer states (see :meth:`load`).

        A ``learning_rate`` schedule is saved as its current value. Not saved: the env and the replay
        buffer (``save_replay_buffer``).

        :param path: file path (``.zip`` added when missing) or writable binary file
        """
        init = self._model_settings()
        if callable(init["learning_rate"]):
            init["learning_rate"] = float(self.lr_schedule(self._current_progress_remaining))
        init = self._init_to_json(init)
        policy_kwargs = dict(self.policy_kwargs)
        if "optimizer_class" in policy_kwargs:
            policy_kwargs["optimizer_class"] = _optimizer_name(policy_kwargs["optimizer_class"])
        for key, value in {**init, **policy_kwargs}.items():
            try:
                json.dumps(value)
            except TypeError as error:
                raise ValueError(f"cannot save {key}={value!r} as plain data") from error
        data = {
            "format": self._save_format(),
            "policy": self._policy_name(),
            "init": init,
            "policy_kwargs": policy_kwargs,
            "observation_space": space_to_json(self.observation_space),
            "action_space": space_to_json(self.action_space),
            "counters": {name: int(getattr(self, name)) for name in self.saved_counters},
        }
        save_to_zip_file(path, data=data, params=self.get_parameters())

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfPlainSave],
        path: str | pathlib.Path | io.BufferedIOBase,
        env: GymEnv | None = None,
        device: torch.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        **kwargs: Any,
    ) -> SelfPlainSave:
        """Load a model saved by :meth:`save`; nothing in the file is unpickled or executed.

        :param path: file path or readable binary file
        :param env: env to continue training on (its spaces must match the saved ones)
        :param device: "auto", "cpu", "cuda" or "cuda:N" (a CUDA device torch does not see is a ``ValueError``)
        :param custom_objects: replacements of saved constructor keywords (e.g. ``learning_rate``),
            ``policy_kwargs`` (e.g. a custom optimizer) or ``policy_class`` (needed for a policy that
            is not one of the aliases); other keys (e.g. ``lr_schedule``) are ignored
        :param print_system_info: print the system info stored in the file
        :param force_reset: accepted for SB3 compatibility; the env is always reset before learning
        :param kwargs: attributes to change on the loaded model (e.g. ``seed``, ``learning_starts``)
        """
        check_device(device)
        device = get_device(device)
        data, params, _ = load_plain_zip(path, device, print_system_info)
        try:
            init, policy, policy_kwargs, observation_space, action_space, counters = cls._read_data(
                data, custom_objects or {}, path if isinstance(path, (str, pathlib.Path)) else "<stream>"
            )
        except (ValueError, TypeError, KeyError) as error:
            raise NotAModelFileError(path, str(error)) from None
        if env is not None:
            env = cls._wrap_env(env, init.get("verbose", 0))
            check_for_correct_spaces(env, observation_space, action_space)
        try:
            model = cls(policy, env, device=device, policy_kwargs=policy_kwargs, _init_setup_model=False, **init)
            if env is None:
                model.observation_space, model.action_space = observation_space, action_space
            for name, value in counters.items():
                if name != "n_envs" or env is None:
                    setattr(model, name, value)
            model.__dict__.update(kwargs)
            model._setup_model()
        except UnsuitableEnvError:
            raise  # the file is fine: the message names the env
        except _SETTINGS_ERRORS as error:
            raise NotAModelFileError(path, f"its settings are refused ({type(error).__name__}: {error})") from None
        try:
            model.set_parameters(params, exact_match=True, device=device)
        except _SETTINGS_ERRORS as error:
            raise NotAModelFileError(path, f"its weights do not fit the model it describes ({error})") from None
        return model

    @classmethod
    def _read_data(
        cls, data: Any, custom_objects: dict[str, Any], where: Any = "<stream>"
    ) -> tuple[dict[str, Any], Any, dict[str, Any], spaces.Space, spaces.Space, dict[str, int]]:
        """Check the ``data`` entry against what :meth:`save` writes; return what the constructor needs."""
        if not isinstance(data, dict):
            raise TypeError(f"its 'data' entry must be a mapping, got {type(data).__name__}")
        if data.get("format") != cls._save_format():
            raise ValueError(f"it was not saved by {cls.__name__}.save (format {data.get('format')!r})")
        if set(data) != _DATA_KEYS:
            raise ValueError(f"its 'data' entry must have the keys {sorted(_DATA_KEYS)}, found {sorted(data)}")
        for key in ("init", "policy_kwargs", "counters", "observation_space", "action_space"):
            if not isinstance(data[key], dict):
                raise TypeError(f"its {key!r} entry must be a mapping, got {type(data[key]).__name__}")
        counters = data["counters"]
        if set(counters) != set(cls.saved_counters):
            raise ValueError(f"its counters must be {sorted(cls.saved_counters)}, found {sorted(counters)}")
        for name, value in counters.items():
            if type(value) is not int or value < 0:
                raise TypeError(f"counter {name!r} must be an integer >= 0, got {value!r}")
        saved = cls._without_run_settings(cls.upgrade_settings(dict(data["init"]), f"the model file {where}"), where)
        unknown = sorted(set(saved) - set(cls._settings_names()))
        if unknown:
            raise ValueError(f"its settings name {unknown}, which {cls.__name__} does not take")
        policy = custom_objects.get("policy_class", data["policy"])
        if isinstance(policy, str) and policy not in cls.policy_aliases:
            raise ValueError(
                f"the model was saved with the custom policy class {policy}; "
                "pass it with custom_objects={'policy_class': ThatClass}"
            )
        policy_kwargs = dict(custom_objects.get("policy_kwargs", data["policy_kwargs"]))
        if isinstance(policy_kwargs.get("optimizer_class"), str):
            policy_kwargs["optimizer_class"] = _optimizer_from_name(policy_kwargs["optimizer_class"])
        init = cls._init_from_json({key: custom_objects.get(key, value) for key, value in saved.items()})
        observation_space = space_from_json(data["observation_space"])
        action_space = space_from_json(data["action_space"])
        if isinstance(policy, str):  # files of older versions named the first alias of a shared policy class
            same = [name for name, value in cls.policy_aliases.items() if value is cls.policy_aliases[policy]]
            if len(same) > 1:
                policy = _alias_for_space(same, observation_space)
        return init, policy, policy_kwargs, observation_space, action_space, dict(counters)


def _alias_for_space(aliases: list[str], observation_space: spaces.Space) -> str:
    """Among aliases of one policy class, the one SB3 expects for ``observation_space``."""
    if isinstance(observation_space, spaces.Dict):
        wanted = "MultiInputPolicy"
    elif isinstance(observation_space, spaces.Box) and len(observation_space.shape) == 3:
        wanted = "CnnPolicy"
    else:
        wanted = "MlpPolicy"
    return wanted if wanted in aliases else aliases[0]
