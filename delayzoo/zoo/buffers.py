"""A run's replay buffer on disk: plain arrays (``.npz``) wherever the buffer is only arrays, a pickle otherwise.

Our agents save their buffers as ``.npz`` archives themselves. Stable-Baselines3's ``ReplayBuffer`` and
``DictReplayBuffer`` hold only arrays too, so the zoo saves them the same way (:func:`save_buffer`,
through :mod:`delayzoo.agents.common.replay_files`) and ``-i`` loads them without ``--trust-run-files``.
Buffers that hold more (``HerReplayBuffer`` keeps a reference to the env, custom buffer classes) are
saved as SB3 pickles and, since unpickling can run code, loaded only with ``--trust-run-files``. The
file's suffix tells which: ``replay_buffer.npz`` / ``rl_model_replay_buffer_<steps>_steps.npz``, or
``.pkl``.

Runs saved before this layout kept every buffer under rl_zoo3's ``.pkl`` names; for our agents those
files are plain arrays and still load (they are read as ``.npz``, and a pickle is refused unread); for
SB3's algorithms they are pickles and need ``--trust-run-files`` (:func:`load_buffer` says so).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.buffers import DictReplayBuffer, ReplayBuffer

from delayzoo.agents.common.plain_save import PlainSaveMixin
from delayzoo.agents.common.replay_files import ReplayFileError, check_array, read_replay_file, save_replay_file
from delayzoo.zoo.errors import ZooError

__all__ = ["PLAIN_BUFFERS", "buffer_suffix", "load_buffer", "save_buffer"]

PLAIN_BUFFERS = (ReplayBuffer, DictReplayBuffer)
"""SB3 buffer classes (exactly these, not subclasses) the zoo saves as plain arrays."""
_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def _plain_sb3(model: BaseAlgorithm) -> bool:
    return type(getattr(model, "replay_buffer", None)) in PLAIN_BUFFERS


def buffer_suffix(model: BaseAlgorithm) -> str:
    """``"npz"`` when ``model``'s replay buffer is saved as plain arrays, ``"pkl"`` when as SB3's pickle."""
    return "npz" if isinstance(model, PlainSaveMixin) or _plain_sb3(model) else "pkl"


def _arrays(buffer: ReplayBuffer | DictReplayBuffer) -> dict[str, np.ndarray]:
    arrays = {}
    for field in _FIELDS:
        value = getattr(buffer, field)
        if isinstance(value, dict):
            arrays.update({f"{field}/{key}": array for key, array in value.items()})
        elif value is not None:  # next_observations is None with optimize_memory_usage
            arrays[field] = value
    return arrays


def save_buffer(model: BaseAlgorithm, path: str | Path) -> None:
    """Write ``model``'s replay buffer at exactly ``path``, in the format :func:`buffer_suffix` names."""
    if _plain_sb3(model):
        buffer = model.replay_buffer  # type: ignore[attr-defined]
        arrays = {"pos": np.int64(buffer.pos), "full": np.bool_(buffer.full), **_arrays(buffer)}
        save_replay_file(path, type(buffer).__name__, arrays)
    else:
        model.save_replay_buffer(path)  # type: ignore[attr-defined]


def _load_plain_sb3(model: BaseAlgorithm, path: Path) -> None:
    """Copy a file written by :func:`save_buffer` into ``model``'s SB3 buffer, after checking all of it."""
    buffer = model.replay_buffer  # type: ignore[attr-defined]
    arrays = read_replay_file(path, type(buffer).__name__)
    pos = int(check_array(path, arrays, "pos", (), "iu"))
    if not 0 <= pos < buffer.buffer_size:
        raise ReplayFileError(path, f"its write position {pos} is not in [0, {buffer.buffer_size - 1}]")
    full = bool(check_array(path, arrays, "full", (), "b"))
    wanted = _arrays(buffer)
    expected = sorted({"pos", "full", *wanted})
    if sorted(arrays) != expected:
        raise ReplayFileError(path, f"it holds the entries {sorted(arrays)}, this model's buffer {expected}")
    for name, array in wanted.items():
        meaning = f"this model's buffer holds {buffer.buffer_size} steps x {buffer.n_envs} envs"
        if check_array(path, arrays, name, array.shape, array.dtype.kind, meaning).dtype != array.dtype:
            raise ReplayFileError(path, f"its {name!r} entry has dtype {arrays[name].dtype}, expected {array.dtype}")
    for name, array in wanted.items():
        array[...] = arrays[name]
    buffer.pos, buffer.full = pos, full
    buffer.device = model.device


def load_buffer(model: BaseAlgorithm, plain: Path, trusted: bool, truncate_last_traj: bool = True) -> Path | None:
    """Load the replay buffer saved next to a model into ``model``: ``plain`` (``.npz``), else the ``.pkl``.

    :param model: the resumed model
    :param plain: the ``.npz`` path of the buffer (the ``.pkl`` one has the same name)
    :param trusted: ``--trust-run-files`` (unpickle SB3's pickled buffers)
    :param truncate_last_traj: SB3's argument for ``HerReplayBuffer``
    :return: the file loaded, or ``None`` when there is none (the run resumes with an empty buffer)
    :raise ZooError: for a file that is refused (a pickle without ``--trust-run-files``, a file that does not fit)
    """
    pickled = plain.with_suffix(".pkl")
    ours = isinstance(model, PlainSaveMixin)
    try:
        if plain.is_file():
            print(f"Loading replay buffer {plain}")
            if _plain_sb3(model):
                _load_plain_sb3(model, plain)
            elif ours:
                model.load_replay_buffer(plain)  # type: ignore[attr-defined]
            else:
                kind = type(getattr(model, "replay_buffer", None)).__name__
                raise ReplayFileError(plain, f"it holds plain arrays, which this model's {kind} does not load")
            return plain
        if not pickled.is_file():
            return None
        if not (ours or trusted):
            raise ZooError(
                f"{pickled} is a pickle (Stable-Baselines3's replay buffer format), and loading it could run code; "
                "pass --trust-run-files if you trust this run folder (or move the file away to resume with an "
                "empty buffer)"
            )
        print(f"Loading replay buffer {pickled}")
        if ours:  # saved before the .npz name: plain arrays all the same, and a pickle is refused unread
            model.load_replay_buffer(pickled)  # type: ignore[attr-defined]
        else:
            model.load_replay_buffer(pickled, truncate_last_traj=truncate_last_traj)  # type: ignore[attr-defined]
        return pickled
    except ReplayFileError as error:
        raise ZooError(f"{error} (move the file away to resume with an empty buffer)") from None

