"""Run files that survive interruptions: atomic writes, plain normalisation statistics, SIGTERM as Ctrl-C.

- :func:`atomic_write` writes a file under a temporary name in the same folder and renames it, so a
  kill mid-save leaves the previous file (or none), never a truncated one.
- :class:`AtomicCheckpointCallback` writes each checkpoint's replay buffer (with
  ``--save-replay-buffer``) and normalisation statistics first and its model last, all atomically: a
  checkpoint ``rl_model_<steps>_steps.zip`` that exists is complete, with
  ``rl_model_replay_buffer_<steps>_steps.npz`` (``.pkl`` for buffers saved as pickles, see
  :mod:`delayzoo.zoo.buffers`) and ``rl_model_vecnormalize_<steps>_steps.npz`` next to it.
  :class:`SaveBestModelCallback` writes the evaluation callback's ``best_model.zip`` atomically too.
- :func:`save_normalization` / :func:`load_normalization` keep ``VecNormalize`` statistics as plain
  arrays (``.npz``); loading runs no code, unlike SB3's pickled ``vecnormalize.pkl``.
- :class:`TerminateAsInterrupt` turns SIGTERM (schedulers, ``docker stop``, ``kill``) into the
  ``KeyboardInterrupt`` of Ctrl-C while training, so the zoo saves the model and the replay buffer.
"""

from __future__ import annotations

import os
import re
import signal
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, CheckpointCallback
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecEnv, VecNormalize

from delayzoo.zoo.buffers import buffer_suffix, save_buffer
from delayzoo.zoo.errors import ZooError

__all__ = [
    "AtomicCheckpointCallback",
    "SaveBestModelCallback",
    "SaveNormalizationCallback",
    "TerminateAsInterrupt",
    "atomic_write",
    "checkpoint_files",
    "load_normalization",
    "save_normalization",
]

_CHECKPOINT = re.compile(r"^rl_model_(\d+)_steps\.zip$")


def atomic_write(path: str | Path, write: Callable[[str], Any]) -> None:
    """Call ``write(temporary path)``, flush it to disk, then rename it to ``path`` (atomic on POSIX).

    The temporary name is ``.tmp-<name>`` in the same folder (same suffix, so writers that append a
    suffix leave it alone); it is removed if ``write`` fails or is interrupted.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".tmp-{path.name}")
    try:
        write(str(temporary))
        with open(temporary, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def checkpoint_files(model_path: str | Path, env_name: str) -> tuple[Path, Path]:
    """The replay buffer and the normalisation statistics saved with the model ``model_path``.

    A checkpoint ``rl_model_<steps>_steps.zip`` has ``rl_model_replay_buffer_<steps>_steps.npz`` and
    ``rl_model_vecnormalize_<steps>_steps.npz``; a final model has ``replay_buffer.npz`` and
    ``<env_name>/vecnormalize.npz`` (rl_zoo3's layout, with plain arrays). A buffer saved as a pickle,
    or before plain buffers had their own name, has the same name ending in ``.pkl``
    (:mod:`delayzoo.zoo.buffers`).
    """
    model_path = Path(model_path)
    match = _CHECKPOINT.match(model_path.name)
    if match:
        steps = match.group(1)
        return (
            model_path.with_name(f"rl_model_replay_buffer_{steps}_steps.npz"),
            model_path.with_name(f"rl_model_vecnormalize_{steps}_steps.npz"),
        )
    return model_path.with_name("replay_buffer.npz"), model_path.parent / str(env_name) / "vecnormalize.npz"


# ---------------------------------------------------------------------- normalisation statistics
def _statistics(env: VecNormalize) -> dict[str, RunningMeanStd]:
    obs_rms = env.obs_rms if isinstance(env.obs_rms, dict) else {"": env.obs_rms}
    return {**{f"obs_rms/{key}": rms for key, rms in obs_rms.items()}, "ret_rms": env.ret_rms}


def save_normalization(env: VecNormalize, path: str | Path) -> None:
    """Save ``env``'s statistics and settings as a plain ``.npz`` archive, atomically."""
    arrays: dict[str, Any] = {
        "norm_obs": np.bool_(env.norm_obs),
        "norm_reward": np.bool_(env.norm_reward),
        "clip_obs": np.float64(env.clip_obs),
        "clip_reward": np.float64(env.clip_reward),
        "gamma": np.float64(env.gamma),
        "epsilon": np.float64(env.epsilon),
        "norm_obs_keys": np.array(env.norm_obs_keys or [], dtype=str),
    }
    for name, rms in _statistics(env).items():
        arrays[f"{name}/mean"], arrays[f"{name}/var"] = np.asarray(rms.mean), np.asarray(rms.var)
        arrays[f"{name}/count"] = np.float64(rms.count)

    def write(temporary: str) -> None:
        with open(temporary, "wb") as handle:
            np.savez(handle, **arrays)

    atomic_write(path, write)


def load_normalization(path: str | Path, venv: VecEnv, training: bool = True) -> VecNormalize:
    """Wrap ``venv`` in a ``VecNormalize`` with the statistics saved by :func:`save_normalization`.

    :param path: the ``.npz`` archive
    :param venv: the env to wrap (its observation space must match the statistics)
    :param training: keep updating the statistics (``False`` for evaluation, which also stops
        normalising rewards)
    :raise ZooError: for a file that is not such an archive or does not fit ``venv``
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
        keys = [str(key) for key in arrays["norm_obs_keys"]] or None
        env = VecNormalize(
            venv,
            training=training,
            norm_obs=bool(arrays["norm_obs"]),
            norm_reward=bool(arrays["norm_reward"]) and training,
            clip_obs=float(arrays["clip_obs"]),
            clip_reward=float(arrays["clip_reward"]),
            gamma=float(arrays["gamma"]),
            epsilon=float(arrays["epsilon"]),
            norm_obs_keys=keys,
        )
        for name, rms in _statistics(env).items():
            mean, var, count = arrays[f"{name}/mean"], arrays[f"{name}/var"], arrays[f"{name}/count"]
            if mean.shape != np.shape(rms.mean) or var.shape != np.shape(rms.var) or count.shape != ():
                raise ValueError(f"{name} has shape {mean.shape}, the env needs {np.shape(rms.mean)}")
            rms.mean, rms.var, rms.count = mean.astype(np.float64), var.astype(np.float64), float(count)
    except (OSError, KeyError, ValueError, TypeError) as error:
        raise ZooError(f"{path} is not normalisation statistics for this env ({error})") from None
    return env


class SaveNormalizationCallback(BaseCallback):
    """Save the model's ``VecNormalize`` statistics as ``<folder>/vecnormalize.npz`` (rl_zoo3 saves on a new best)."""

    def __init__(self, folder: str | Path, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.folder = Path(folder)

    def _on_step(self) -> bool:
        env = self.model.get_vec_normalize_env()
        if env is not None:
            save_normalization(env, self.folder / "vecnormalize.npz")
        return True


class SaveBestModelCallback(BaseCallback):
    """Save the model as ``<folder>/best_model.zip``, atomically (the evaluation callback's new best model)."""

    def __init__(self, folder: str | Path, verbose: int = 0) -> None:
        super().__init__(verbose)
        self.folder = Path(folder)

    def _on_step(self) -> bool:
        atomic_write(self.folder / "best_model.zip", self.model.save)
        return True


class AtomicCheckpointCallback(CheckpointCallback):
    """SB3's ``CheckpointCallback``, writing atomically, the model last, and statistics as ``.npz``."""

    def _on_step(self) -> bool:
        if self.n_calls % self.save_freq != 0:
            return True
        buffer = getattr(self.model, "replay_buffer", None)
        if self.save_replay_buffer and buffer is not None and hasattr(self.model, "save_replay_buffer"):
            path = self._checkpoint_path("replay_buffer_", extension=buffer_suffix(self.model))
            atomic_write(path, partial(save_buffer, self.model))
        statistics = self.model.get_vec_normalize_env()
        if self.save_vecnormalize and statistics is not None:
            save_normalization(statistics, self._checkpoint_path("vecnormalize_", extension="npz"))
        path = self._checkpoint_path(extension="zip")
        atomic_write(path, self.model.save)
        if self.verbose >= 2:
            print(f"Saving model checkpoint to {path}")
        return True


class TerminateAsInterrupt:
    """While armed, SIGTERM raises ``KeyboardInterrupt`` (once); disarmed, further SIGTERMs are ignored.

    ``install()`` (main thread only; elsewhere it does nothing) -> training -> ``disarm()`` -> saving ->
    ``restore()``: a SIGTERM during training stops it as Ctrl-C does, and one during the final save
    cannot cut it short.
    """

    def __init__(self) -> None:
        self.armed = False
        self.received = False
        self._previous: Any = None
        self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True
        if self.armed:
            self.armed = False
            raise KeyboardInterrupt("SIGTERM")

    def install(self) -> None:
        """Start handling SIGTERM (armed)."""
        if threading.current_thread() is threading.main_thread() and not self._installed:
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self._installed = True
        self.armed = True

    def disarm(self) -> None:
        """Keep handling SIGTERM, but only record it."""
        self.armed = False

    def restore(self) -> None:
        """Give SIGTERM back to its previous handler."""
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False
        self.armed = False
