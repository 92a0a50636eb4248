"""Game segments, prioritised replay over a single-frame store, and EfficientZero's unrolled targets.

Frames are stored once. An observation that stacks ``k`` frames channels-first (``make_atari(...,
frame_stack=k)``) is kept as its newest frame only, plus the ``k - 1`` frames before the first
observation of each segment; stacks are rebuilt at sample time by index arithmetic
(:func:`stack_frames`). 100k Atari steps of 96x96 RGB frames take about 2.9 GB (12x96x96 stacks
would take 11 GB).

The replay stores what the agent trains its model on: the *executed* action
(``info["executed_action"]``), or the agent's own *decided* action for the paper's Oblivious-EZ
(``DelayedEZ(replay_actions=...)``). A search made at decision time ``t`` was rooted at the forecast
state of step ``t + d_t`` (the step where its action is executed); when the agent stores its visit
distribution (``DelayedEZ(forecast_policy="store")``), it is the policy target of the observation at
``t + d_t`` (:meth:`GameWriter.record_search`).
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import numpy as np
import torch

from delayzoo.agents.common.replay_files import ReplayFileError, check_array
from delayzoo.agents.delayed_ez.config import TargetConfig

__all__ = ["GameSegment", "GameWriter", "PrioritizedGameBuffer", "ReplayBatch", "check_replay_arrays", "stack_frames"]


def split_frames(observation: np.ndarray, frame_stack: int) -> np.ndarray:
    """``(k * C, ...)`` -> ``(k, C, ...)`` (the frames of a channels-first stack, oldest first)."""
    observation = np.asarray(observation)
    if observation.shape[0] % frame_stack:
        raise ValueError(
            f"an observation of shape {observation.shape} cannot hold frame_stack={frame_stack} frames "
            "(its first axis must be a multiple of it)"
        )
    return observation.reshape(frame_stack, observation.shape[0] // frame_stack, *observation.shape[1:])


def stack_frames(frames: torch.Tensor, offsets: torch.Tensor, frame_stack: int) -> torch.Tensor:
    """Observations rebuilt from frame windows: ``out[b, m] = concat(frames[b, o], ..., frames[b, o + k - 1])``.

    :param frames: ``(B, W, *frame_shape)`` windows of consecutive frames
    :param offsets: ``(B, M)`` integer offsets, ``o = offsets[b, m]`` with ``o + k <= W``
    :param frame_stack: ``k``
    :return: ``(B, M, k * frame_shape[0], *frame_shape[1:])``
    """
    batch, count = offsets.shape
    index = offsets.unsqueeze(-1) + torch.arange(frame_stack, device=offsets.device)
    rows = torch.arange(batch, device=offsets.device).view(batch, 1, 1)
    out = frames[rows, index]
    return out.reshape(batch, count, frame_stack * frames.shape[2], *frames.shape[3:])


class GameSegment:
    """A stretch of one episode: ``T`` transitions and ``T + 1`` observations, stored as ``T + k`` frames.

    :param frames: ``(T + k, *frame_shape)``: the ``k - 1`` frames before observation 0, then the newest
        frame of observations ``0..T``; observation ``q`` stacks ``frames[q : q + k]``
    :param actions: ``(T,)`` stored actions (executed or decided)
    :param rewards: ``(T,)`` rewards used for learning (clipped if asked)
    :param policies: ``(T, A)`` search policies (normalised visit counts) paired with observations ``0..T-1``
    :param has_policy: ``(T,)`` whether a search was rooted at that observation
    :param terminated: the episode ended (terminal state) after the last transition; otherwise the
        values at the end are bootstrapped from observation ``T``
    :param frame_stack: ``k``, frames per observation
    """

    def __init__(
        self,
        frames: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        policies: np.ndarray,
        has_policy: np.ndarray,
        terminated: bool,
        frame_stack: int = 1,
    ) -> None:
        length = len(actions)
        if length < 1:
            raise ValueError("a game segment needs at least one transition")
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        if len(frames) != length + frame_stack or len(rewards) != length or len(policies) != length:
            raise ValueError(
                f"inconsistent segment: {len(frames)} frames, {length} actions, {len(rewards)} rewards, "
                f"{len(policies)} policies (need T + frame_stack, T, T, T with frame_stack={frame_stack})"
            )
        self.frames = np.asarray(frames)
        self.actions = np.asarray(actions, dtype=np.int64)
        self.rewards = np.asarray(rewards, dtype=np.float32)
        self.policies = np.asarray(policies, dtype=np.float32)
        self.has_policy = np.asarray(has_policy, dtype=bool)
        self.terminated = bool(terminated)
        self.frame_stack = frame_stack

    def __len__(self) -> int:
        return len(self.actions)

    def observation(self, index: int) -> np.ndarray:
        """Observation ``index`` (``0..T``), its frames stacked as the env returned them."""
        frames = self.frames[index : index + self.frame_stack]
        return frames.reshape(self.frame_stack * frames.shape[1], *frames.shape[2:])

    @property
    def observations(self) -> np.ndarray:
        """All ``T + 1`` observations, stacked (a copy)."""
        return np.stack([self.observation(index) for index in range(len(self) + 1)])


class GameWriter:
    """Builds the game segments of one env, step by step.

    :param num_actions: size of the action space
    :param segment_length: a running episode is cut into segments of at most this many transitions
    :param frame_stack: frames stacked (channels-first) in each observation; only the newest is kept per step
    """

    def __init__(self, num_actions: int, segment_length: int = 200, frame_stack: int = 1) -> None:
        if segment_length < 1:
            raise ValueError(f"segment_length must be >= 1, got {segment_length}")
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        self.num_actions = num_actions
        self.segment_length = segment_length
        self.frame_stack = frame_stack
        self._frames: list[np.ndarray] = []
        self._actions: list[int] = []
        self._rewards: list[float] = []
        self._policies: dict[int, np.ndarray] = {}
        self._episode_step = 0
        self._segment_start = 0

    def start(self, observation: np.ndarray) -> None:
        """Begin a new episode at ``observation``."""
        self._frames = list(np.array(split_frames(observation, self.frame_stack)))
        self._actions, self._rewards = [], []
        self._policies = {}
        self._episode_step = 0
        self._segment_start = 0

    def record_search(self, policy: np.ndarray, delay: int) -> None:
        """Record the search of the decision about to be taken.

        :param policy: the weights of the policy target ``(A,)``, stored normalised: the root visit counts
            (pUCT) or the improved policy (Gumbel)
        :param delay: how many steps ahead of the current observation the search root was (0 when the
            search started from the current observation); a later search for the same step replaces
            an earlier one, like its action overtakes the earlier action in the delay queue
        """
        total = float(np.sum(policy))
        if not total > 0:
            raise ValueError(f"the search policy must have a positive sum, got {policy}")
        self._policies[self._episode_step + int(delay)] = np.asarray(policy, dtype=np.float32) / total

    def step(
        self, action: int, reward: float, next_observation: np.ndarray, terminated: bool, truncated: bool
    ) -> GameSegment | None:
        """Add one transition; returns a finished segment (episode end or full segment), else ``None``.

        After an episode end, call :meth:`start` with the first observation of the next episode.

        :raises ValueError: when ``next_observation`` is not the previous stack shifted by one frame
            (the env does not stack ``frame_stack`` frames channels-first)
        """
        frames = split_frames(next_observation, self.frame_stack)
        k = self.frame_stack
        if k > 1 and not np.array_equal(frames[:-1], np.stack(self._frames[-(k - 1) :])):
            raise ValueError(
                f"the observation is not the previous one shifted by one frame: the env does not stack "
                f"frame_stack={k} frames channels-first (make_atari(..., frame_stack={k}))"
            )
        self._actions.append(int(action))
        self._rewards.append(float(reward))
        self._frames.append(np.array(frames[-1]))
        self._episode_step += 1
        if terminated or truncated:
            return self._close(terminated)
        if len(self._actions) >= self.segment_length:
            segment = self._close(False)
            self._frames = self._frames[-k:]
            self._actions, self._rewards = [], []
            self._segment_start = self._episode_step
            return segment
        return None

    def unfinished(self) -> GameSegment | None:
        """The transitions of the running segment as a cut (non-terminal) segment, or ``None`` if there are none.

        The writer is left as it was (used to save a replay buffer without losing the running episodes).
        """
        if not self._actions:
            return None
        return self._segment(False, pop=False)

    def _close(self, terminated: bool) -> GameSegment:
        return self._segment(terminated, pop=True)

    def _segment(self, terminated: bool, pop: bool) -> GameSegment:
        length = len(self._actions)
        policies = np.zeros((length, self.num_actions), dtype=np.float32)
        has_policy = np.zeros(length, dtype=bool)
        for step in range(self._segment_start, self._segment_start + length):
            policy = self._policies.pop(step, None) if pop else self._policies.get(step)
            if policy is not None:
                policies[step - self._segment_start] = policy
                has_policy[step - self._segment_start] = True
        return GameSegment(
            np.stack(self._frames), np.array(self._actions), np.array(self._rewards), policies, has_policy, terminated,
            self.frame_stack,
        )


class ReplayBatch(NamedTuple):
    """Training targets for ``B`` sampled positions unrolled ``K`` steps (numpy arrays).

    Observations come as frame windows plus offsets (rebuild them with :func:`stack_frames`): the
    sample's own observation is at offset 0, the one ``u`` steps later at ``policy_offset[:, u]``.
    Value targets are ``returns + bootstrap_discount * v(obs at bootstrap_offset)`` with ``v`` from the
    target network; policy targets are ``stored_policy`` unless reanalysed.
    """

    frames: np.ndarray  # (B, W, *frame_shape): frames p - k + 1 .. p + K + n of each sample
    policy_offset: np.ndarray  # (B, K + 1): observations p .. p + K (clipped to the segment end)
    bootstrap_offset: np.ndarray  # (B, K + 1): observations p + u + n (clipped to the segment end)
    actions: np.ndarray  # (B, K)
    consistency_mask: np.ndarray  # (B, K)
    target_value_prefix: np.ndarray  # (B, K)
    value_prefix_mask: np.ndarray  # (B, K)
    returns: np.ndarray  # (B, K + 1)
    bootstrap_discount: np.ndarray  # (B, K + 1)
    value_mask: np.ndarray  # (B, K + 1)
    policy_valid: np.ndarray  # (B, K + 1): position inside the segment (has an action)
    stored_policy: np.ndarray  # (B, K + 1, A)
    stored_policy_mask: np.ndarray  # (B, K + 1)
    weights: np.ndarray  # (B,) importance-sampling weights, max 1
    slots: np.ndarray  # (B,) where the samples are stored
    ids: np.ndarray  # (B,) their transition ids (a slot may be reused after eviction)


class PrioritizedGameBuffer:
    """Prioritised replay (proportional, ``P(i) ~ p_i^alpha``) over segments kept in flat ring arrays.

    New transitions get the largest *current* priority (EfficientZero); the oldest segments are
    dropped to make room. Frames live in one array of ``capacity + capacity // 16 + frame_stack``
    frames (segments add ``frame_stack`` frames beyond their transitions), allocated at the first
    :meth:`add`; transitions in arrays of ``capacity`` slots.

    :param capacity: transitions kept
    :param alpha: priority exponent (0 = uniform)
    :param eps: added to every priority update
    :param frame_stack: frames per observation (``k``)
    """

    def __init__(self, capacity: int, alpha: float = 0.6, eps: float = 1e-6, frame_stack: int = 1) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        if frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        self.capacity = capacity
        self.alpha = alpha
        self.eps = eps
        self.frame_stack = frame_stack
        self.frame_capacity = capacity + capacity // 16 + frame_stack
        self.total_added = 0
        self._segments: collections.deque[tuple[int, int, int, int]] = collections.deque()  # slot, T, frame, frames
        self._num_transitions = 0
        self._num_frames = 0
        self._slot_head = 0
        self._frame_head = 0
        self._frames: np.ndarray | None = None

    def __len__(self) -> int:
        return self._num_transitions

    @property
    def num_segments(self) -> int:
        """Segments stored."""
        return len(self._segments)

    @property
    def frame_shape(self) -> tuple[int, ...] | None:
        """Shape of one stored frame (``None`` before the first :meth:`add`)."""
        return None if self._frames is None else tuple(self._frames.shape[1:])

    @property
    def num_actions(self) -> int | None:
        """Size of the stored policies (``None`` before the first :meth:`add`)."""
        return None if self._frames is None else int(self._policies.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes allocated by the store (0 before the first :meth:`add`)."""
        if self._frames is None:
            return 0
        arrays = (self._frames, self._actions, self._rewards, self._policies, self._has_policy, self._priorities,
                  self._live, self._position, self._length, self._frame_start, self._terminated, self._ids)
        return int(sum(array.nbytes for array in arrays))

    def _allocate(self, game: GameSegment) -> None:
        capacity = self.capacity
        self._frames = np.zeros((self.frame_capacity, *game.frames.shape[1:]), dtype=game.frames.dtype)
        self._actions = np.zeros(capacity, dtype=np.int32)
        self._rewards = np.zeros(capacity, dtype=np.float32)
        self._policies = np.zeros((capacity, game.policies.shape[1]), dtype=np.float32)
        self._has_policy = np.zeros(capacity, dtype=bool)
        self._priorities = np.zeros(capacity, dtype=np.float64)
        self._live = np.zeros(capacity, dtype=bool)
        self._position = np.zeros(capacity, dtype=np.int32)  # position in its segment
        self._length = np.zeros(capacity, dtype=np.int32)  # its segment's length
        self._frame_start = np.zeros(capacity, dtype=np.int64)  # its segment's first frame
        self._terminated = np.zeros(capacity, dtype=bool)
        self._ids = np.zeros(capacity, dtype=np.int64)

    def add(self, game: GameSegment, priorities: np.ndarray | None = None, start_id: int | None = None) -> None:
        """Store a segment, evicting the oldest segments to make room.

        :param priorities: ``(T,)`` (when reloading); default: the maximum of the current priorities (1 when empty)
        :param start_id: id of its first transition (when reloading); default: the next id
        """
        if game.frame_stack != self.frame_stack:
            raise ValueError(f"the segment stacks {game.frame_stack} frames, the buffer {self.frame_stack}")
        length, num_frames = len(game), len(game.frames)
        if length > self.capacity or num_frames > self.frame_capacity:
            raise ValueError(f"a segment of {length} transitions does not fit a buffer of capacity {self.capacity}")
        if self._frames is None:
            self._allocate(game)
        elif game.frames.shape[1:] != self._frames.shape[1:] or game.policies.shape[1] != self._policies.shape[1]:
            raise ValueError(
                f"segment frames {game.frames.shape[1:]} / {game.policies.shape[1]} actions do not match the "
                f"stored {self._frames.shape[1:]} / {self._policies.shape[1]}"
            )
        if priorities is None:
            priority = float(self._priorities[self._live].max()) if self._num_transitions else 1.0
            priorities = np.full(length, priority)
        while self._num_transitions + length > self.capacity or self._num_frames + num_frames > self.frame_capacity:
            self._evict()
        slots = (self._slot_head + np.arange(length)) % self.capacity
        frames = (self._frame_head + np.arange(num_frames)) % self.frame_capacity
        self._frames[frames] = game.frames
        self._actions[slots] = game.actions
        self._rewards[slots] = game.rewards
        self._policies[slots] = game.policies
        self._has_policy[slots] = game.has_policy
        self._priorities[slots] = priorities
        self._live[slots] = True
        self._position[slots] = np.arange(length)
        self._length[slots] = length
        self._frame_start[slots] = self._frame_head
        self._terminated[slots] = game.terminated
        first_id = self.total_added if start_id is None else start_id
        self._ids[slots] = first_id + np.arange(length)
        self.total_added = max(self.total_added, first_id + length)
        self._segments.append((self._slot_head, length, self._frame_head, num_frames))
        self._slot_head = (self._slot_head + length) % self.capacity
        self._frame_head = (self._frame_head + num_frames) % self.frame_capacity
        self._num_transitions += length
        self._num_frames += num_frames

    def _evict(self) -> None:
        slot, length, _, num_frames = self._segments.popleft()
        self._live[(slot + np.arange(length)) % self.capacity] = False
        self._num_transitions -= length
        self._num_frames -= num_frames

    def segments(self) -> list[GameSegment]:
        """The stored segments, oldest first (copies)."""
        out = []
        for slot, length, frame, num_frames in self._segments:
            slots = (slot + np.arange(length)) % self.capacity
            out.append(
                GameSegment(
                    self._frames[(frame + np.arange(num_frames)) % self.frame_capacity],
                    self._actions[slots], self._rewards[slots], self._policies[slots], self._has_policy[slots],
                    bool(self._terminated[slot]), self.frame_stack,
                )
            )
        return out

    def priorities(self) -> np.ndarray:
        """Priorities of the stored transitions, oldest first."""
        if not self._segments:
            return np.zeros(0)
        slot = self._segments[0][0]
        return self._priorities[(slot + np.arange(self._num_transitions)) % self.capacity].copy()

    # ----------------------------------------------------------------- sampling
    def sample_indices(self, batch_size: int, rng: np.random.Generator, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """Draw slots in proportion to ``priority^alpha``.

        :return: the slots and importance weights ``(N P(i))^-beta / max``
        """
        if not self._num_transitions:
            raise ValueError("cannot sample from an empty replay buffer")
        scaled = np.where(self._live, self._priorities, 0.0) ** self.alpha * self._live
        probs = scaled / scaled.sum()
        slots = rng.choice(self.capacity, size=batch_size, p=probs)
        weights = (self._num_transitions * probs[slots]) ** (-beta)
        return slots, (weights / weights.max()).astype(np.float32)

    def update_priorities(self, slots: np.ndarray, ids: np.ndarray, priorities: np.ndarray) -> None:
        """Set new priorities (e.g. ``|value - target|``) of sampled transitions still stored."""
        priorities = np.asarray(priorities, dtype=np.float64)
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError(f"priorities must be finite and >= 0, got {priorities}")
        keep = self._live[slots] & (self._ids[slots] == ids)
        self._priorities[slots[keep]] = priorities[keep] + self.eps

    def stacked_observations(self, slots: np.ndarray, offsets: np.ndarray) -> np.ndarray:
        """Observations ``offsets`` steps after the stored ``slots`` (clipped to their segment's end).

        :param slots: ``(B,)``
        :param offsets: ``(B, M)`` non-negative
        :return: ``(B, M, *observation_shape)``
        """
        position = self._position[slots][:, None] + offsets
        target = np.minimum(position, self._length[slots][:, None])
        index = target[..., None] + np.arange(self.frame_stack)
        frames = self._frames[(self._frame_start[slots][:, None, None] + index) % self.frame_capacity]
        batch, count = offsets.shape
        return frames.reshape(batch, count, self.frame_stack * frames.shape[3], *frames.shape[4:])

    def sample(self, batch_size: int, config: TargetConfig, rng: np.random.Generator, beta: float = 1.0) -> ReplayBatch:
        """Sample positions and build their unrolled targets (:meth:`make_targets`)."""
        slots, weights = self.sample_indices(batch_size, rng, beta)
        return self.make_targets(slots, weights, config, rng)

    def make_targets(
        self, slots: np.ndarray, weights: np.ndarray, config: TargetConfig, rng: np.random.Generator
    ) -> ReplayBatch:
        """Unrolled targets of stored transitions (see :class:`ReplayBatch`), without a loop over samples.

        Beyond the end of a terminated episode the state is absorbing (reward and value 0, no policy);
        beyond the end of a cut segment the value and value-prefix targets are masked. Actions beyond the
        end are drawn uniformly at random.
        """
        assert self._frames is not None
        unroll, td, k, discount = config.num_unroll_steps, config.td_steps, self.frame_stack, config.discount
        batch = len(slots)
        position = self._position[slots].astype(np.int64)
        length = self._length[slots].astype(np.int64)[:, None]
        terminated = self._terminated[slots][:, None]
        first_slot = (slots - position) % self.capacity
        n = np.full(batch, td, dtype=np.int64)
        if config.auto_td_period:
            age = self.total_added - self._ids[slots]
            n = np.clip(td - age // config.auto_td_period, 1, td)
        steps = np.arange(unroll + 1)
        q = position[:, None] + steps  # (B, K + 1) positions of the unroll
        inside = q < length
        at_q = (first_slot[:, None] + np.minimum(q, length - 1)) % self.capacity
        actions = np.where(
            inside[:, :unroll], self._actions[at_q[:, :unroll]], rng.integers(self.num_actions, size=(batch, unroll))
        )
        stop = np.minimum(q + n[:, None], length)
        horizon = np.arange(td)
        reward_position = q[..., None] + horizon  # (B, K + 1, td)
        reward_slots = (first_slot[:, None, None] + np.minimum(reward_position, length[..., None] - 1)) % self.capacity
        rewards = np.where(reward_position < stop[..., None], self._rewards[reward_slots], 0.0)
        returns = (rewards * discount ** horizon).sum(-1).astype(np.float32)
        bootstrap_discount = np.where(
            (stop == length) & terminated, 0.0, discount ** np.maximum(stop - q, 0).astype(np.float64)
        )
        value_mask = (q <= length) | terminated
        bootstrap_discount = np.where(value_mask, bootstrap_discount, 0.0).astype(np.float32)
        step_rewards = np.where(inside[:, :unroll], self._rewards[at_q[:, :unroll]], 0.0)
        prefix = np.zeros((batch, unroll), dtype=np.float32)
        for start in range(0, unroll, config.lstm_horizon):  # EfficientZero's LSTM horizon: a few groups
            end = min(start + config.lstm_horizon, unroll)
            prefix[:, start:end] = np.cumsum(step_rewards[:, start:end], axis=1)
        window = np.arange(unroll + td + k)  # frames p - k + 1 .. p + K + td, clipped to the segment
        frame_index = np.minimum(position[:, None] + window, length + k - 1)
        frames = self._frames[(self._frame_start[slots][:, None] + frame_index) % self.frame_capacity]
        return ReplayBatch(
            frames=frames,
            policy_offset=np.minimum(q, length) - position[:, None],
            bootstrap_offset=stop - position[:, None],
            actions=actions.astype(np.int64),
            consistency_mask=(q[:, 1:] <= length).astype(np.float32),
            target_value_prefix=prefix,
            value_prefix_mask=(inside[:, :unroll] | terminated).astype(np.float32),
            returns=returns,
            bootstrap_discount=bootstrap_discount,
            value_mask=value_mask.astype(np.float32),
            policy_valid=inside,
            stored_policy=np.where(inside[..., None], self._policies[at_q], 0.0).astype(np.float32),
            stored_policy_mask=(inside & self._has_policy[at_q]).astype(np.float32),
            weights=np.asarray(weights, dtype=np.float32),
            slots=np.asarray(slots),
            ids=self._ids[slots].copy(),
        )

    # ----------------------------------------------------------------- plain arrays
    def state_arrays(self, unfinished: list[GameSegment] | tuple[GameSegment, ...] = ()) -> dict[str, Any]:
        """The buffer as plain arrays, for :func:`numpy.savez`.

        :param unfinished: running segments (:meth:`GameWriter.unfinished`) saved after the stored ones,
            as cut segments at the current maximum priority
        """
        games = self.segments()
        priorities = [self.priorities()] if games else []
        ids = [self._ids[slot] for slot, _, _, _ in self._segments]
        current = float(self._priorities[self._live].max()) if self._num_transitions else 1.0
        next_id = self.total_added
        for game in unfinished:
            games.append(game)
            priorities.append(np.full(len(game), current))
            ids.append(next_id)
            next_id += len(game)
        out: dict[str, Any] = {
            "capacity": np.asarray(self.capacity),
            "alpha": np.asarray(self.alpha),
            "eps": np.asarray(self.eps),
            "frame_stack": np.asarray(self.frame_stack),
            "total_added": np.asarray(next_id),
            "lengths": np.asarray([len(game) for game in games], dtype=np.int64),
            "start_ids": np.asarray(ids, dtype=np.int64),
            "terminated": np.asarray([game.terminated for game in games], dtype=bool),
        }
        if games:
            out.update(
                frames=np.concatenate([game.frames for game in games]),
                actions=np.concatenate([game.actions for game in games]),
                rewards=np.concatenate([game.rewards for game in games]),
                policies=np.concatenate([game.policies for game in games]),
                has_policy=np.concatenate([game.has_policy for game in games]),
                priorities=np.concatenate(priorities),
            )
        return out

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray], path: Any = None) -> PrioritizedGameBuffer:
        """Inverse of :meth:`state_arrays`, for arrays read by
        :func:`~delayzoo.agents.common.replay_files.read_replay_file` (``path`` names the file in messages).

        :raise ReplayFileError: when the arrays do not describe a buffer :meth:`state_arrays` could have
            written (missing or mistyped entries, segment lengths that claim more or fewer transitions or
            frames than the arrays hold, actions outside the policies' width, negative priorities)
        """
        _check_state_arrays(arrays, path)
        frame_stack = int(arrays["frame_stack"])
        buffer = cls(int(arrays["capacity"]), float(arrays["alpha"]), float(arrays["eps"]), frame_stack)
        lengths = arrays["lengths"].astype(np.int64)
        transition, frame = 0, 0
        for length, start_id, terminated in zip(lengths, arrays["start_ids"], arrays["terminated"]):
            span = slice(transition, transition + length)
            game = GameSegment(
                arrays["frames"][frame : frame + length + frame_stack], arrays["actions"][span],
                arrays["rewards"][span], arrays["policies"][span], arrays["has_policy"][span], bool(terminated),
                frame_stack,
            )
            buffer.add(game, arrays["priorities"][span], int(start_id))
            transition += length
            frame += length + frame_stack
        buffer.total_added = int(arrays["total_added"])
        return buffer


def _check_state_arrays(arrays: dict[str, np.ndarray], path: Any) -> None:
    """Check the arrays of a saved :class:`PrioritizedGameBuffer` (see :meth:`PrioritizedGameBuffer.from_arrays`)."""
    capacity = int(check_array(path, arrays, "capacity", (), "iu"))
    alpha, eps = float(check_array(path, arrays, "alpha", (), "f")), float(check_array(path, arrays, "eps", (), "f"))
    frame_stack = int(check_array(path, arrays, "frame_stack", (), "iu"))
    total_added = int(check_array(path, arrays, "total_added", (), "iu"))
    if capacity < 1 or frame_stack < 1 or total_added < 0 or not (np.isfinite([alpha, eps]).all() and alpha >= 0):
        raise ReplayFileError(
            path, f"its settings are out of range (capacity={capacity}, frame_stack={frame_stack}, "
            f"total_added={total_added}, alpha={alpha}, eps={eps})",
        )
    lengths = check_array(path, arrays, "lengths", None, "iu")
    count = len(lengths) if lengths.ndim == 1 else -1
    check_array(path, arrays, "lengths", (count,), "iu")
    check_array(path, arrays, "start_ids", (count,), "iu")
    check_array(path, arrays, "terminated", (count,), "b")
    if count == 0:
        return
    if lengths.min() < 1 or lengths.max() > capacity:
        raise ReplayFileError(
            path, f"its segment lengths must be in [1, {capacity}], found {lengths.min()}..{lengths.max()}"
        )
    transitions, frames = int(lengths.sum()), int(lengths.sum()) + count * frame_stack
    claim = f"its lengths claim {transitions} transitions in {count} segments"
    for name, kinds in (("actions", "iu"), ("rewards", "f"), ("has_policy", "b"), ("priorities", "f")):
        held = check_array(path, arrays, name, None, kinds)
        if held.shape != (transitions,):
            raise ReplayFileError(path, f"{claim}, its {name!r} entry holds {held.shape} (expected ({transitions},))")
    policies = check_array(path, arrays, "policies", None, "f")
    if policies.ndim != 2 or policies.shape[0] != transitions or policies.shape[1] < 1:
        raise ReplayFileError(
            path, f"{claim}, its 'policies' entry holds {policies.shape} (expected ({transitions}, A))"
        )
    stored = check_array(path, arrays, "frames", None, "iuf")
    if stored.ndim < 2 or stored.shape[0] != frames:
        raise ReplayFileError(
            path, f"{claim}, which need {frames} frames with frame_stack={frame_stack}; "
            f"its 'frames' entry holds {stored.shape[:1]}",
        )
    actions, priorities = arrays["actions"], arrays["priorities"]
    if actions.min() < 0 or actions.max() >= policies.shape[1]:
        raise ReplayFileError(
            path, f"its actions must be in [0, {policies.shape[1] - 1}], found {actions.min()}..{actions.max()}"
        )
    if not (np.isfinite(priorities).all() and priorities.min() >= 0):
        raise ReplayFileError(path, "its priorities must be finite and >= 0")


def check_replay_arrays(
    path: Any, arrays: dict[str, np.ndarray], observation_shape: tuple[int, ...], num_actions: int, frame_stack: int
) -> None:
    """Refuse a saved replay whose frame stack, observations or action count differ from a model's
    (a :class:`~delayzoo.agents.common.replay_files.ReplayFileError` naming the file).

    :param observation_shape: the model's stacked observation shape (the env's own, inside a pending view)
    """
    saved_stack = int(check_array(path, arrays, "frame_stack", (), "iu"))
    if saved_stack != frame_stack:
        raise ReplayFileError(path, f"it stacks {saved_stack} frames, the model {frame_stack}")
    if len(check_array(path, arrays, "lengths", None, "iu")) == 0:
        return
    frames = check_array(path, arrays, "frames", None, "iuf")
    policies = check_array(path, arrays, "policies", None, "f")
    stacked = (saved_stack * frames.shape[1], *frames.shape[2:]) if frames.ndim >= 2 else frames.shape
    if stacked != tuple(observation_shape):
        raise ReplayFileError(path, f"it holds observations of shape {stacked}, the model takes {observation_shape}")
    if policies.ndim != 2 or policies.shape[1] != num_actions:
        width = policies.shape[1] if policies.ndim == 2 else policies.shape
        raise ReplayFileError(path, f"it holds policies over {width} actions, the model has {num_actions}")
