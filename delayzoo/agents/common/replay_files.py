"""Replay-buffer files of plain arrays: written with the name of their owner, read whole and checked before use.

The agents save their replay buffers as ``.npz`` archives of plain arrays (loading them runs no code),
with a ``format`` entry naming the buffer that wrote them (:func:`replay_format`). :func:`read_replay_file`
reads every array into memory before the caller looks at any, so that a truncated or corrupt file, a
pickle, or the buffer of another agent is refused with a :class:`ReplayFileError` naming the file, before
anything is changed; the callers then check the arrays against their model (:func:`check_array`) and
only then copy them in.
"""

from __future__ import annotations

import io
import os
import pathlib
import struct
import zipfile
import zlib
from typing import Any

import numpy as np

__all__ = ["FORMAT_KEY", "ReplayFileError", "check_array", "read_replay_file", "replay_format", "save_replay_file"]

FORMAT_KEY = "format"
"""The entry of a replay-buffer file that names the buffer that wrote it."""
_PREFIX = "delayzoo.replay_buffer/"
_LEGACY_KEYS = {"PWM": {"pos", "next_is_first", "is_first"}, "DelayedEZ": {"lengths", "frame_stack", "start_ids"}}
"""How files written before the ``format`` entry existed are told apart: keys only that owner's files hold."""
_READ_ERRORS = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error, struct.error, NotImplementedError)


def replay_format(owner: str) -> str:
    """The ``format`` entry of a file written by ``owner`` (``"PWM"``, ``"DelayedEZ"``, an SB3 buffer class name)."""
    return f"{_PREFIX}{owner}/1"


def _where(path: Any) -> str:
    return str(path) if isinstance(path, (str, os.PathLike)) else "<stream>"


class ReplayFileError(ValueError):
    """A replay-buffer file that is refused; the message names the file and what is wrong with it."""

    def __init__(self, path: Any, reason: str) -> None:
        super().__init__(f"replay buffer file {_where(path)}: {reason}")


def save_replay_file(path: str | pathlib.Path | io.BufferedIOBase, owner: str, arrays: dict[str, Any]) -> None:
    """Write ``arrays`` and the ``format`` entry of ``owner`` as an ``.npz`` archive at exactly ``path``.

    :param path: file path (no suffix is added; its folder is created) or writable binary file
    :param owner: the buffer the arrays come from (see :func:`replay_format`)
    :param arrays: plain numeric or boolean arrays
    """
    if isinstance(path, (str, os.PathLike)):
        path = pathlib.Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            np.savez(handle, **{FORMAT_KEY: np.str_(replay_format(owner))}, **arrays)
    else:
        np.savez(path, **{FORMAT_KEY: np.str_(replay_format(owner))}, **arrays)


def _owner(path: Any, arrays: dict[str, np.ndarray]) -> str | None:
    found = arrays.pop(FORMAT_KEY, None)
    if found is None:
        return next((owner for owner, keys in _LEGACY_KEYS.items() if keys <= set(arrays)), None)
    text = str(found) if found.shape == () and found.dtype.kind == "U" else ""
    if not (text.startswith(_PREFIX) and text.count("/") == 2):
        raise ReplayFileError(path, f"its {FORMAT_KEY!r} entry {found.tolist()!r} is not one delayzoo writes")
    owner, version = text[len(_PREFIX) :].split("/")
    if version != "1":
        raise ReplayFileError(path, f"it was written in version {version} of the {owner} format; this delayzoo reads 1")
    return owner


def read_replay_file(path: str | pathlib.Path | io.BufferedIOBase, owner: str) -> dict[str, np.ndarray]:
    """Every array of a replay-buffer file written by :func:`save_replay_file` for ``owner``, in memory.

    :param path: file path or readable binary file
    :param owner: the buffer that must have written it
    :raise FileNotFoundError: for a path that does not exist
    :raise ReplayFileError: for a file that is not a complete ``.npz`` archive of plain arrays (truncated,
        corrupt, pickled) or holds the buffer of another owner
    """
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ReplayFileError(path, "it holds a single array, not an .npz archive of a replay buffer")
        with data:
            arrays = {name: data[name] for name in data.files}
    except (FileNotFoundError, ReplayFileError):
        raise
    except _READ_ERRORS as error:
        if "pickled" in str(error):
            reason = "it holds pickled data, which loading a replay buffer never reads (it could run code)"
        else:
            reason = f"it is not a complete .npz archive of plain arrays ({type(error).__name__}: {error})"
        raise ReplayFileError(path, reason) from None
    found = _owner(path, arrays)
    if found != owner:
        what = f"the replay buffer of {found}" if found else "no replay buffer delayzoo writes"
        raise ReplayFileError(path, f"it holds {what}, not one of {owner}")
    return arrays


def check_array(
    path: Any, arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...] | None, kinds: str, what: str = ""
) -> np.ndarray:
    """``arrays[name]``, if it is there with ``shape`` (any, for ``None``) and a dtype kind in ``kinds``.

    :param path: the file, for messages
    :param arrays: what :func:`read_replay_file` returned
    :param name: the entry
    :param shape: the shape it must have
    :param kinds: numpy dtype kinds accepted (``"iu"`` integers, ``"f"`` floats, ``"b"`` booleans)
    :param what: what the shape means, added to the message (``"this model's buffer holds ..."``)
    :raise ReplayFileError: naming the file and the entry
    """
    if name not in arrays:
        raise ReplayFileError(path, f"it has no {name!r} entry")
    array = arrays[name]
    if shape is not None and array.shape != shape:
        raise ReplayFileError(
            path, f"its {name!r} entry has shape {array.shape}, expected {shape}" + (f" ({what})" if what else "")
        )
    if array.dtype.kind not in kinds:
        raise ReplayFileError(path, f"its {name!r} entry has dtype {array.dtype}, expected one of kind {kinds!r}")
    return array
