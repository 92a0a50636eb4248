"""Game segments, prioritised replay and EfficientZero's unrolled training targets.

The replay stores what the env *executed* (``info["executed_action"]``), so the model learns the
undelayed environment. A search made at decision time ``t`` was rooted at the forecast state of
step ``t + d_t`` (the step where its action is executed); its visit distribution is therefore the
policy target of the observation at ``t + d_t``, not of the observation at ``t``
(:meth:`GameWriter.record_search`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = ["GameSegment", "GameWriter", "PrioritizedGameBuffer", "ReplayBatch"]


class GameSegment:
    """A stretch of one episode: ``T`` transitions and ``T + 1`` observations.

    :param observations: ``(T + 1, *obs_shape)``; the last one follows the last transition
    :param actions: ``(T,)`` executed actions
    :param rewards: ``(T,)``
    :param policies: ``(T, A)`` search policies (normalised visit counts) paired with ``observations[:T]``
    :param has_policy: ``(T,)`` whether a search was rooted at that observation
    :param terminated: the episode ended (terminal state) after the last transition; otherwise the
        values at the end are bootstrapped from ``observations[T]``
    """

    def __init__(
        self,
        observations: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        policies: np.ndarray,
        has_policy: np.ndarray,
        terminated: bool,
    ) -> None:
        length = len(actions)
        if length < 1:
            raise ValueError("a game segment needs at least one transition")
        if len(observations) != length + 1 or len(rewards) != length or len(policies) != length:
            raise ValueError(
                f"inconsistent segment: {len(observations)} observations, {length} actions, "
                f"{len(rewards)} rewards, {len(policies)} policies (need T + 1, T, T, T)"
            )
        self.observations = observations
        self.actions = np.asarray(actions, dtype=np.int64)
        self.rewards = np.asarray(rewards, dtype=np.float32)
        self.policies = np.asarray(policies, dtype=np.float32)
        self.has_policy = np.asarray(has_policy, dtype=bool)
        self.terminated = bool(terminated)
        self.priorities = np.ones(length, dtype=np.float64)
        self.start_id = 0

    def __len__(self) -> int:
        return len(self.actions)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """Plain arrays (for saving the replay buffer without pickle)."""
        return {
            "observations": self.observations,
            "actions": self.actions,
            "rewards": self.rewards,
            "policies": self.policies,
            "has_policy": self.has_policy,
            "terminated": np.asarray(self.terminated),
            "priorities": self.priorities,
            "start_id": np.asarray(self.start_id),
        }

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> GameSegment:
        """Inverse of :meth:`to_arrays`."""
        game = cls(
            arrays["observations"],
            arrays["actions"],
            arrays["rewards"],
            arrays["policies"],
            arrays["has_policy"],
            bool(arrays["terminated"]),
        )
        game.priorities = np.asarray(arrays["priorities"], dtype=np.float64)
        game.start_id = int(arrays["start_id"])
        return game


class GameWriter:
    """Builds the game segments of one env, step by step.

    :param num_actions: size of the action space
    :param segment_length: a running episode is cut into segments of at most this many transitions
    """

    def __init__(self, num_actions: int, segment_length: int = 200) -> None:
        if segment_length < 1:
            raise ValueError(f"segment_length must be >= 1, got {segment_length}")
        self.num_actions = num_actions
        self.segment_length = segment_length
        self._observations: list[np.ndarray] = []
        self._actions: list[int] = []
        self._rewards: list[float] = []
        self._policies: dict[int, np.ndarray] = {}
        self._episode_step = 0
        self._segment_start = 0

    def start(self, observation: np.ndarray) -> None:
        """Begin a new episode at ``observation``."""
        self._observations = [np.array(observation)]
        self._actions, self._rewards = [], []
        self._policies = {}
        self._episode_step = 0
        self._segment_start = 0

    def record_search(self, visits: np.ndarray, delay: int) -> None:
        """Record the search of the decision about to be taken.

        :param visits: root visit counts ``(A,)``
        :param delay: how many steps ahead of the current observation the search root was (0 when the
            search started from the current observation); a later search for the same step replaces
            an earlier one, like its action overtakes the earlier action in the delay queue
        """
        total = float(np.sum(visits))
        if total <= 0:
            raise ValueError(f"visit counts must have a positive sum, got {visits}")
        self._policies[self._episode_step + int(delay)] = np.asarray(visits, dtype=np.float32) / total

    def step(
        self, executed_action: int, reward: float, next_observation: np.ndarray, terminated: bool, truncated: bool
    ) -> GameSegment | None:
        """Add one transition; returns a finished segment (episode end or full segment), else ``None``.

        After an episode end, call :meth:`start` with the first observation of the next episode.
        """
        self._actions.append(int(executed_action))
        self._rewards.append(float(reward))
        self._observations.append(np.array(next_observation))
        self._episode_step += 1
        if terminated or truncated:
            return self._close(terminated)
        if len(self._actions) >= self.segment_length:
            segment = self._close(False)
            self._observations = [self._observations[-1]]
            self._actions, self._rewards = [], []
            self._segment_start = self._episode_step
            return segment
        return None

    def _close(self, terminated: bool) -> GameSegment:
        length = len(self._actions)
        policies = np.zeros((length, self.num_actions), dtype=np.float32)
        has_policy = np.zeros(length, dtype=bool)
        for step in range(self._segment_start, self._segment_start + length):
            policy = self._policies.pop(step, None)
            if policy is not None:
                policies[step - self._segment_start] = policy
                has_policy[step - self._segment_start] = True
        return GameSegment(
            np.stack(self._observations),
            np.array(self._actions),
            np.array(self._rewards),
            policies,
            has_policy,
            terminated,
        )


class ReplayBatch(NamedTuple):
    """Training targets for ``B`` sampled positions unrolled ``K`` steps (numpy arrays).

    Value targets are ``returns + bootstrap_discount * v(bootstrap_obs)`` with ``v`` from the target
    network; policy targets are ``stored_policy`` unless reanalysed from ``policy_obs``.
    """

    obs: np.ndarray  # (B, *obs)
    actions: np.ndarray  # (B, K)
    target_obs: np.ndarray  # (B, K, *obs)
    consistency_mask: np.ndarray  # (B, K)
    target_value_prefix: np.ndarray  # (B, K)
    value_prefix_mask: np.ndarray  # (B, K)
    returns: np.ndarray  # (B, K + 1)
    bootstrap_obs: np.ndarray  # (B, K + 1, *obs)
    bootstrap_discount: np.ndarray  # (B, K + 1)
    value_mask: np.ndarray  # (B, K + 1)
    policy_obs: np.ndarray  # (B, K + 1, *obs)
    policy_valid: np.ndarray  # (B, K + 1): position inside the segment (has an action)
    stored_policy: np.ndarray  # (B, K + 1, A)
    stored_policy_mask: np.ndarray  # (B, K + 1)
    weights: np.ndarray  # (B,) importance-sampling weights, max 1
    games: list[GameSegment]
    positions: np.ndarray  # (B,)


class PrioritizedGameBuffer:
    """Prioritised replay over game segments (proportional, ``P(i) ~ p_i^alpha``).

    New transitions get the largest priority seen so far; the oldest segments are dropped once more
    than ``capacity`` transitions are stored.

    :param capacity: transitions kept
    :param alpha: priority exponent (0 = uniform)
    :param eps: added to every priority update
    """

    def __init__(self, capacity: int, alpha: float = 0.6, eps: float = 1e-6) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        if alpha < 0:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self.capacity = capacity
        self.alpha = alpha
        self.eps = eps
        self.games: list[GameSegment] = []
        self.num_transitions = 0
        self.total_added = 0
        self.max_priority = 1.0

    def __len__(self) -> int:
        return self.num_transitions

    def add(self, game: GameSegment) -> None:
        """Store a segment with maximal priorities, evicting the oldest segments beyond capacity."""
        game.priorities = np.full(len(game), self.max_priority, dtype=np.float64)
        game.start_id = self.total_added
        self.total_added += len(game)
        self.games.append(game)
        self.num_transitions += len(game)
        while self.num_transitions > self.capacity and len(self.games) > 1:
            self.num_transitions -= len(self.games.pop(0))

    def sample_indices(
        self, batch_size: int, rng: np.random.Generator, beta: float
    ) -> tuple[list[GameSegment], np.ndarray, np.ndarray]:
        """Draw positions in proportion to ``priority^alpha``.

        :return: the games, the positions in them, and importance weights ``(N P(i))^-beta / max``
        """
        if not self.games:
            raise ValueError("cannot sample from an empty replay buffer")
        priorities = np.concatenate([game.priorities for game in self.games]) ** self.alpha
        probs = priorities / priorities.sum()
        flat = rng.choice(len(probs), size=batch_size, p=probs)
        weights = (len(probs) * probs[flat]) ** (-beta)
        weights = weights / weights.max()
        bounds = np.cumsum([len(game) for game in self.games])
        game_index = np.searchsorted(bounds, flat, side="right")
        positions = flat - np.concatenate([[0], bounds[:-1]])[game_index]
        return [self.games[i] for i in game_index], positions.astype(np.int64), weights.astype(np.float32)

    def update_priorities(self, games: list[GameSegment], positions: np.ndarray, priorities: np.ndarray) -> None:
        """Set new priorities (e.g. ``|value - target|``) at sampled positions."""
        priorities = np.asarray(priorities, dtype=np.float64)
        if not np.all(np.isfinite(priorities)) or np.any(priorities < 0):
            raise ValueError(f"priorities must be finite and >= 0, got {priorities}")
        for game, position, priority in zip(games, positions, priorities):
            game.priorities[position] = priority + self.eps
        self.max_priority = max(self.max_priority, float(priorities.max()) + self.eps)

    def sample(
        self,
        batch_size: int,
        num_unroll_steps: int,
        td_steps: int,
        discount: float,
        lstm_horizon: int,
        rng: np.random.Generator,
        beta: float = 1.0,
        auto_td_period: int | None = None,
    ) -> ReplayBatch:
        """Sample positions and build their unrolled targets.

        :param td_steps: n of the n-step value targets
        :param lstm_horizon: value prefixes restart every this many unroll steps
        :param auto_td_period: EfficientZero's adaptive horizon: ``n`` shrinks by one per this many
            transitions of age (never below 1); ``None`` keeps ``n = td_steps``
        """
        games, positions, weights = self.sample_indices(batch_size, rng, beta)
        return make_targets(
            games, positions, weights, num_unroll_steps, td_steps, discount, lstm_horizon, rng,
            self.total_added, auto_td_period,
        )

    def state_arrays(self) -> dict[str, Any]:
        """The buffer as plain arrays, for :func:`numpy.savez`."""
        out: dict[str, Any] = {
            "capacity": np.asarray(self.capacity),
            "alpha": np.asarray(self.alpha),
            "eps": np.asarray(self.eps),
            "num_games": np.asarray(len(self.games)),
            "total_added": np.asarray(self.total_added),
            "max_priority": np.asarray(self.max_priority),
        }
        for i, game in enumerate(self.games):
            for key, value in game.to_arrays().items():
                out[f"game{i}/{key}"] = value
        return out

    @classmethod
    def from_arrays(cls, arrays: Any) -> PrioritizedGameBuffer:
        """Inverse of :meth:`state_arrays` (``arrays``: a mapping such as an ``NpzFile``)."""
        buffer = cls(int(arrays["capacity"]), float(arrays["alpha"]), float(arrays["eps"]))
        for i in range(int(arrays["num_games"])):
            prefix = f"game{i}/"
            keys = (
                "observations", "actions", "rewards", "policies", "has_policy", "terminated", "priorities", "start_id"
            )
            game = GameSegment.from_arrays({key: arrays[prefix + key] for key in keys})
            buffer.games.append(game)
            buffer.num_transitions += len(game)
        buffer.total_added = int(arrays["total_added"])
        buffer.max_priority = float(arrays["max_priority"])
        return buffer


def make_targets(
    games: list[GameSegment],
    positions: np.ndarray,
    weights: np.ndarray,
    num_unroll_steps: int,
    td_steps: int,
    discount: float,
    lstm_horizon: int,
    rng: np.random.Generator,
    total_added: int = 0,
    auto_td_period: int | None = None,
) -> ReplayBatch:
    """Unrolled targets for given positions (see :class:`ReplayBatch`).

    Beyond the end of a terminated episode the state is absorbing (reward and value 0, no policy);
    beyond the end of a cut segment the value and value-prefix targets are masked. Actions beyond the
    end are drawn uniformly at random.
    """
    if td_steps < 1:
        raise ValueError(f"td_steps must be >= 1, got {td_steps}")
    batch = len(games)
    unroll = num_unroll_steps
    num_actions = games[0].policies.shape[1]
    obs_shape = games[0].observations.shape[1:]
    obs_dtype = games[0].observations.dtype
    obs = np.empty((batch, *obs_shape), dtype=obs_dtype)
    target_obs = np.empty((batch, unroll, *obs_shape), dtype=obs_dtype)
    bootstrap_obs = np.empty((batch, unroll + 1, *obs_shape), dtype=obs_dtype)
    policy_obs = np.empty((batch, unroll + 1, *obs_shape), dtype=obs_dtype)
    actions = rng.integers(num_actions, size=(batch, unroll))
    consistency_mask = np.zeros((batch, unroll), dtype=np.float32)
    target_value_prefix = np.zeros((batch, unroll), dtype=np.float32)
    value_prefix_mask = np.zeros((batch, unroll), dtype=np.float32)
    returns = np.zeros((batch, unroll + 1), dtype=np.float32)
    bootstrap_discount = np.zeros((batch, unroll + 1), dtype=np.float32)
    value_mask = np.zeros((batch, unroll + 1), dtype=np.float32)
    policy_valid = np.zeros((batch, unroll + 1), dtype=bool)
    stored_policy = np.zeros((batch, unroll + 1, num_actions), dtype=np.float32)
    stored_policy_mask = np.zeros((batch, unroll + 1), dtype=np.float32)
    for i, (game, start) in enumerate(zip(games, positions)):
        length = len(game)
        n = td_steps
        if auto_td_period:
            age = total_added - (game.start_id + int(start))
            n = int(np.clip(td_steps - age // auto_td_period, 1, td_steps))
        obs[i] = game.observations[start]
        for u in range(unroll + 1):
            p = start + u
            policy_obs[i, u] = game.observations[min(p, length)]
            bootstrap_obs[i, u] = game.observations[min(p + n, length)]
            if u > 0:
                target_obs[i, u - 1] = game.observations[min(p, length)]
                consistency_mask[i, u - 1] = float(p <= length)
            if p < length:
                if u < unroll:
                    actions[i, u] = game.actions[p]
                stop = min(p + n, length)
                steps = np.arange(stop - p)
                returns[i, u] = float(np.sum(game.rewards[p:stop] * discount**steps))
                bootstrap_discount[i, u] = 0.0 if (stop == length and game.terminated) else discount ** (stop - p)
                value_mask[i, u] = 1.0
                policy_valid[i, u] = True
                stored_policy[i, u] = game.policies[p]
                stored_policy_mask[i, u] = float(game.has_policy[p])
            elif p == length or game.terminated:
                # at the end of a segment: 0 if terminal, else the bootstrap value of the last observation
                bootstrap_discount[i, u] = 0.0 if game.terminated else 1.0
                value_mask[i, u] = 1.0
        prefix = 0.0
        for u in range(unroll):
            if u % lstm_horizon == 0:
                prefix = 0.0
            p = start + u
            if p < length:
                prefix += float(game.rewards[p])
            target_value_prefix[i, u] = prefix
            value_prefix_mask[i, u] = float(p < length or game.terminated)
    return ReplayBatch(
        obs, actions, target_obs, consistency_mask, target_value_prefix, value_prefix_mask, returns, bootstrap_obs,
        bootstrap_discount, value_mask, policy_obs, policy_valid, stored_policy, stored_policy_mask, weights, games,
        np.asarray(positions),
    )
