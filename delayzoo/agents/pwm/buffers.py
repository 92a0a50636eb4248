"""A replay buffer of contiguous sequences for world-model training."""

from __future__ import annotations

import io
import pathlib
import warnings
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import BaseBuffer
from stable_baselines3.common.preprocessing import is_image_space

from delayzoo.agents.common.replay_files import ReplayFileError, check_array, read_replay_file, save_replay_file

try:
    import psutil
except ImportError:  # optional, as in SB3's buffers
    psutil = None


class SequenceSamples(NamedTuple):
    """A batch of windows, batch-major ``(B, T, ...)``; ``observations`` is a tensor or a dict of them."""

    observations: torch.Tensor | dict[str, torch.Tensor]
    actions: torch.Tensor
    rewards: torch.Tensor
    terminals: torch.Tensor
    is_first: torch.Tensor


class SequenceReplayBuffer(BaseBuffer):
    """Per-env ring buffers of steps, sampled as windows of consecutive steps of one env.

    Each step stores the observation the action was taken in, the (normalised) action, the reward,
    ``terminal`` (``terminated`` or ``info["life_loss"]``; time-limit truncations are not terminals)
    and ``is_first`` (the observation starts an episode or follows a life loss). Images keep the
    space's dtype (uint8). A window never crosses the write position, so it never joins the newest
    step to the oldest one after the ring wrapped; it may cross episode starts, which ``is_first`` marks.

    :param buffer_size: capacity in steps over all envs (``buffer_size // n_envs`` per env).
    :param observation_space: observation space (``Dict`` spaces store one array per key).
    :param action_space: ``Discrete`` or ``Box``.
    :param device: device of the sampled tensors.
    :param n_envs: number of parallel envs.
    :param optimize_memory_usage: unused, accepted for SB3's constructor call.
    """

    file_owner = "PWM"
    """The owner named in the files :meth:`save` writes (:mod:`delayzoo.agents.common.replay_files`)."""

    def __init__(
        self,
        buffer_size: int,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        device: torch.device | str = "auto",
        n_envs: int = 1,
        optimize_memory_usage: bool = False,
    ) -> None:
        super().__init__(buffer_size, observation_space, action_space, device, n_envs=n_envs)
        self.buffer_size = max(buffer_size // n_envs, 1)
        self.keys: list[str | None] = (
            list(observation_space.spaces) if isinstance(observation_space, spaces.Dict) else [None]
        )
        self.observations = {key: self._empty_observations(key) for key in self.keys}
        if isinstance(action_space, spaces.Discrete):
            self.actions = np.zeros((self.buffer_size, n_envs), dtype=np.int64)
        else:
            self.actions = np.zeros((self.buffer_size, n_envs, *action_space.shape), dtype=np.float32)
        self.rewards = np.zeros((self.buffer_size, n_envs), dtype=np.float32)
        self.terminals = np.zeros((self.buffer_size, n_envs), dtype=bool)
        self.is_first = np.zeros((self.buffer_size, n_envs), dtype=bool)
        self.next_is_first = np.ones(n_envs, dtype=bool)
        self._check_memory()

    def nbytes(self) -> int:
        """Bytes the buffer holds once full (``np.zeros`` commits its pages only as they are written)."""
        return sum(array.nbytes for array in self._arrays().values())

    def _check_memory(self) -> None:
        """Warn, like SB3's ``ReplayBuffer``, when the full buffer will not fit in the available memory."""
        if psutil is None:
            return
        available = psutil.virtual_memory().available
        if self.nbytes() > available:
            warnings.warn(
                f"This system does not have apparently enough memory to store the complete replay buffer: "
                f"{self.nbytes() / 1e9:.2f} GB > {available / 1e9:.2f} GB available "
                f"(buffer_size={self.buffer_size * self.n_envs}); lower buffer_size or the observation size",
                stacklevel=3,
            )

    def _space(self, key: str | None) -> spaces.Space:
        return self.observation_space if key is None else self.observation_space.spaces[key]

    def _empty_observations(self, key: str | None) -> np.ndarray:
        space = self._space(key)
        dtype = space.dtype if isinstance(space, spaces.Box) and is_image_space(space, check_channels=False) else None
        if dtype is None:
            dtype = np.int64 if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)) else np.float32
        return np.zeros((self.buffer_size, self.n_envs, *space.shape), dtype=dtype)

    def mark_episode_starts(self) -> None:
        """Flag the next step of every env as the first of an episode (after an external ``reset``)."""
        self.next_is_first[:] = True

    def add(
        self,
        obs: np.ndarray | dict[str, np.ndarray],
        next_obs: np.ndarray | dict[str, np.ndarray],
        action: np.ndarray,
        reward: np.ndarray,
        done: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """Store one step of every env (SB3's ``ReplayBuffer.add`` signature; ``next_obs`` is not needed)."""
        reward = np.asarray(reward, dtype=np.float32).reshape(self.n_envs)
        if not np.all(np.isfinite(reward)):
            raise ValueError(f"Rewards must be finite, got {reward}")
        done = np.asarray(done, dtype=bool).reshape(self.n_envs)
        truncated = np.array([info.get("TimeLimit.truncated", False) for info in infos], dtype=bool)
        life_loss = np.array([info.get("life_loss", False) for info in infos], dtype=bool)
        for key in self.keys:
            value = obs if key is None else obs[key]
            self.observations[key][self.pos] = np.asarray(value).reshape(self.observations[key].shape[1:])
        self.actions[self.pos] = np.asarray(action).reshape(self.actions.shape[1:])
        self.rewards[self.pos] = reward
        self.terminals[self.pos] = (done & ~truncated) | life_loss
        self.is_first[self.pos] = self.next_is_first
        self.next_is_first = done | life_loss
        self.pos += 1
        if self.pos == self.buffer_size:
            self.full, self.pos = True, 0

    def stored_steps(self) -> int:
        """Steps stored per env."""
        return self.buffer_size if self.full else self.pos

    def window_indices(
        self, batch_size: int, sequence_length: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        """Row indices ``(B, T)`` and env indices ``(B,)`` of uniformly drawn valid windows."""
        stored = self.stored_steps()
        if sequence_length > stored:
            raise ValueError(f"Cannot sample windows of {sequence_length} steps from {stored} stored steps per env")
        oldest = self.pos if self.full else 0
        starts = rng.integers(0, stored - sequence_length + 1, size=batch_size)
        rows = (oldest + starts[:, None] + np.arange(sequence_length)) % self.buffer_size
        return rows, rng.integers(0, self.n_envs, size=batch_size)

    def sample(  # type: ignore[override]
        self, batch_size: int, sequence_length: int, rng: np.random.Generator | None = None
    ) -> SequenceSamples:
        """Sample ``batch_size`` windows of ``sequence_length`` consecutive steps."""
        rows, envs = self.window_indices(batch_size, sequence_length, rng or np.random.default_rng())
        cols = envs[:, None]
        tensor = lambda array: torch.as_tensor(array[rows, cols], device=self.device)  # noqa: E731
        observations = {key: tensor(self.observations[key]) for key in self.keys}
        return SequenceSamples(
            observations=observations[None] if self.keys == [None] else observations,
            actions=tensor(self.actions),
            rewards=tensor(self.rewards),
            terminals=tensor(self.terminals),
            is_first=tensor(self.is_first),
        )

    def _get_samples(self, batch_inds: np.ndarray, env=None):  # type: ignore[override]
        raise TypeError("SequenceReplayBuffer samples windows: call sample(batch_size, sequence_length)")

    def _arrays(self) -> dict[str, np.ndarray]:
        arrays = {f"obs/{key}": value for key, value in self.observations.items()}
        arrays.update(actions=self.actions, rewards=self.rewards, terminals=self.terminals, is_first=self.is_first)
        return arrays

    def save(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:
        """Write the contents as a plain ``.npz`` archive (no pickled objects) at exactly ``path``."""
        extra = {"num_actions": np.int64(self.action_space.n)} if isinstance(self.action_space, spaces.Discrete) else {}
        save_replay_file(
            path,
            self.file_owner,
            {"pos": np.int64(self.pos), "full": np.bool_(self.full), "next_is_first": self.next_is_first,
             **extra, **self._arrays()},
        )

    def load(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:
        """Read an archive written by :meth:`save` for the same spaces, capacity and number of envs.

        The whole file is read and checked (every array, the write position, the flags, the stored
        actions against the action space) before anything is changed.

        :raise ReplayFileError: naming the file and what does not fit
        """
        arrays = read_replay_file(path, self.file_owner)
        self._check_file(path, arrays)
        for name, array in self._arrays().items():
            array[...] = arrays[name]
        self.pos, self.full = int(arrays["pos"]), bool(arrays["full"])
        self.next_is_first = arrays["next_is_first"].copy()

    def _check_file(self, path: Any, arrays: dict[str, np.ndarray]) -> None:
        """Refuse a file whose arrays, write position, flags or actions do not fit this buffer (see :meth:`load`)."""

        def mismatch(reason: str) -> ReplayFileError:
            return ReplayFileError(path, f"it does not match this buffer: {reason}")

        for name in ("pos", "full", "next_is_first"):
            if name not in arrays:
                raise mismatch(f"it has no {name!r}")
        pos, full, next_is_first = arrays["pos"], arrays["full"], arrays["next_is_first"]
        if pos.shape != () or pos.dtype.kind not in "iu" or not 0 <= int(pos) < self.buffer_size:
            raise mismatch(f"write position {pos.tolist()!r} is not an integer in [0, {self.buffer_size - 1}]")
        if full.shape != () or full.dtype != np.bool_:
            raise mismatch(f"'full' is {full.tolist()!r}, not a boolean")
        if next_is_first.shape != (self.n_envs,) or next_is_first.dtype != np.bool_:
            raise mismatch(
                f"'next_is_first' is {next_is_first.shape} {next_is_first.dtype}, expected ({self.n_envs},) bool"
            )
        for name, array in self._arrays().items():
            held = arrays.get(name)
            if name.startswith("obs/") and held is not None and held.shape[2:] != array.shape[2:]:
                key = "" if name == "obs/None" else f" (key {name[4:]!r})"
                raise ReplayFileError(
                    path, f"it holds observations{key} of shape {held.shape[2:]}, the model takes {array.shape[2:]}"
                )
            if held is None or held.shape != array.shape or held.dtype != array.dtype:
                found = None if held is None else (held.shape, held.dtype)
                meaning = f"{self.buffer_size} steps x {self.n_envs} envs"
                raise mismatch(f"{name!r} is {found}, expected {(array.shape, array.dtype)} ({meaning})")
        if isinstance(self.action_space, spaces.Discrete):
            count = int(self.action_space.n)
            saved = int(check_array(path, arrays, "num_actions", (), "iu")) if "num_actions" in arrays else count
            actions = arrays["actions"]
            if saved != count:
                raise ReplayFileError(path, f"it was saved for {saved} actions, this model has {count}")
            if actions.min(initial=0) < 0 or actions.max(initial=0) >= count:
                raise ReplayFileError(
                    path, f"it holds actions {int(actions.min())}..{int(actions.max())}, this model has {count}"
                )
