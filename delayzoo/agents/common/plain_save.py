"""Model files that load without running code from them.

SB3's zip archive stores tensors as ``.pth`` entries (read with ``weights_only=True``) and everything
else in a JSON ``data`` entry, where objects JSON cannot hold (spaces, schedules, classes) are
cloudpickled, so loading them can run code. Here the agents write only plain values there (spaces
through :func:`space_to_json`) and read it back with :func:`load_plain_zip`, which refuses pickled
entries; :class:`PlainSaveMixin` gives them ``save`` and ``load`` in that format.
"""

from __future__ import annotations

import inspect
import io
import json
import pathlib
import zipfile
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.save_util import load_from_zip_file, open_path, save_to_zip_file
from stable_baselines3.common.type_aliases import GymEnv, TrainFreq
from stable_baselines3.common.utils import check_for_correct_spaces, get_device

_PICKLE_MARK = ":serialized:"
_NOT_SAVED = ("self", "policy", "env", "device", "policy_kwargs", "_init_setup_model")

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


def space_from_json(data: dict[str, Any]) -> spaces.Space:
    """Inverse of :func:`space_to_json`."""
    kind = data.get("type")
    if kind == "Box":
        dtype, shape = np.dtype(data["dtype"]), tuple(data["shape"])
        low = np.broadcast_to(np.asarray(data["low"], dtype=dtype), shape).copy()
        high = np.broadcast_to(np.asarray(data["high"], dtype=dtype), shape).copy()
        return spaces.Box(low, high, shape=shape, dtype=dtype)
    if kind == "Discrete":
        return spaces.Discrete(data["n"], start=data["start"])
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(np.asarray(data["nvec"]), start=np.asarray(data["start"]))
    if kind == "MultiBinary":
        return spaces.MultiBinary(data["n"])
    if kind == "Dict":
        return spaces.Dict({key: space_from_json(sub) for key, sub in data["spaces"].items()})
    raise ValueError(f"Unknown space description {data!r}")


def _reject_pickles(value: Any, where: str) -> None:
    if isinstance(value, dict):
        if _PICKLE_MARK in value:
            raise ValueError(
                f"{where} holds a pickled object; refusing to load it (this file was not written by delayzoo)"
            )
        for key, item in value.items():
            _reject_pickles(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _reject_pickles(item, f"{where}[{index}]")


def load_plain_zip(
    path: str | pathlib.Path | io.BufferedIOBase, device: torch.device | str = "auto", print_system_info: bool = False
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any] | None]:
    """Read an SB3 zip archive without unpickling: ``(data, params, pytorch_variables)``.

    :param path: the archive (``.zip`` is appended when the path has no suffix and does not exist).
    :param device: where to put the tensors.
    :param print_system_info: print the system info stored at save time.
    """
    file = open_path(path, "r", suffix="zip")
    try:
        with zipfile.ZipFile(file) as archive:
            if "data" not in archive.namelist():
                raise ValueError(f"{path} has no 'data' entry: not a saved model")
            data = json.loads(archive.read("data").decode())
    except zipfile.BadZipFile as error:
        raise ValueError(f"{path} is not a zip file") from error
    finally:
        if isinstance(path, (str, pathlib.Path)):
            file.close()
    _reject_pickles(data, "data")
    if isinstance(path, io.BufferedIOBase):
        path.seek(0)
    _, params, pytorch_variables = load_from_zip_file(
        path, load_data=False, device=device, print_system_info=print_system_info
    )
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
    name in :mod:`torch.optim`.
    """

    saved_counters: ClassVar[tuple[str, ...]] = ("num_timesteps", "_n_updates", "_episode_num", "n_envs")
    """Attributes restored after loading (``n_envs`` only when no env is given)."""

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

    def save(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:  # type: ignore[override]
        """Save the settings as plain JSON, the weights and the optimizer states (see :meth:`load`).

        A ``learning_rate`` schedule is saved as its current value. Not saved: the env and the replay
        buffer (``save_replay_buffer``).

        :param path: file path (``.zip`` added when missing) or writable binary file
        """
        init = {
            name: getattr(self, name) if hasattr(self, name) else getattr(self, "_" + name)
            for name in inspect.signature(type(self).__init__).parameters
            if name not in _NOT_SAVED
        }
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
        aliases = [name for name, value in self.policy_aliases.items() if value is self.policy_class]
        data = {
            "format": self._save_format(),
            "policy": aliases[0] if aliases else f"{self.policy_class.__module__}.{self.policy_class.__qualname__}",
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
        :param device: "auto", "cpu" or "cuda"
        :param custom_objects: replacements of saved constructor keywords (e.g. ``learning_rate``),
            ``policy_kwargs`` (e.g. a custom optimizer) or ``policy_class`` (needed for a policy that
            is not one of the aliases); other keys (e.g. ``lr_schedule``) are ignored
        :param print_system_info: print the system info stored in the file
        :param force_reset: accepted for SB3 compatibility; the env is always reset before learning
        :param kwargs: attributes to change on the loaded model (e.g. ``seed``, ``learning_starts``)
        """
        device = get_device(device)
        data, params, _ = load_plain_zip(path, device, print_system_info)
        if data.get("format") != cls._save_format():
            raise ValueError(f"{path} was not saved by {cls.__name__}.save (format {data.get('format')!r})")
        custom_objects = custom_objects or {}
        policy = custom_objects.get("policy_class", data["policy"])
        if isinstance(policy, str) and policy not in cls.policy_aliases:
            raise ValueError(
                f"the model was saved with the custom policy class {policy}; "
                "pass it with custom_objects={'policy_class': ThatClass}"
            )
        policy_kwargs = dict(custom_objects.get("policy_kwargs", data["policy_kwargs"]))
        if isinstance(policy_kwargs.get("optimizer_class"), str):
            policy_kwargs["optimizer_class"] = _optimizer_from_name(policy_kwargs["optimizer_class"])
        init = cls._init_from_json({key: custom_objects.get(key, value) for key, value in data["init"].items()})
        observation_space = space_from_json(data["observation_space"])
        action_space = space_from_json(data["action_space"])
        if env is not None:
            env = cls._wrap_env(env, init["verbose"])
            check_for_correct_spaces(env, observation_space, action_space)
        model = cls(policy, env, device=device, policy_kwargs=policy_kwargs, _init_setup_model=False, **init)
        if env is None:
            model.observation_space, model.action_space = observation_space, action_space
        for name, value in data["counters"].items():
            if name != "n_envs" or env is None:
                setattr(model, name, value)
        model.__dict__.update(kwargs)
        model._setup_model()
        model.set_parameters(params, exact_match=True, device=device)
        return model
