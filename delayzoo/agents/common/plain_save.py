"""Model files that load without running code from them.

SB3's zip archive stores tensors as ``.pth`` entries (read with ``weights_only=True``) and everything
else in a JSON ``data`` entry, where objects JSON cannot hold (spaces, schedules, classes) are
cloudpickled, so loading them can run code. Here the agents write only plain values there (spaces
through :func:`space_to_json`) and read it back with :func:`load_plain_zip`, which refuses pickled
entries.
"""

from __future__ import annotations

import io
import json
import pathlib
import zipfile
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.save_util import load_from_zip_file, open_path

_PICKLE_MARK = ":serialized:"


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
