from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from delayzoo.agents.delayed_ez.config import TargetConfig
from delayzoo.agents.delayed_ez.replay import GameSegment, GameWriter, PrioritizedGameBuffer, stack_frames
from delayzoo.wrappers.atari import FrameStack


def _game(rewards, terminated, num_actions=2, start_obs=0.0):
    length = len(rewards)
    obs = (start_obs + np.arange(length + 1, dtype=np.float32)).reshape(-1, 1)
    policies = np.tile(np.eye(num_actions, dtype=np.float32)[0], (length, 1))
    actions = np.arange(length) % num_actions
    return GameSegment(obs, actions, np.asarray(rewards), policies, np.ones(length, bool), terminated)


def _config(**kwargs: Any) -> TargetConfig:
    return TargetConfig(**{"num_unroll_steps": 5, "td_steps": 3, "discount": 0.5, "lstm_horizon": 2,
                           "auto_td_period": None, **kwargs})


def test_search_policy_is_paired_with_the_observation_it_was_rooted_at():
    writer = GameWriter(num_actions=3, segment_length=100)
    writer.start(np.array([0.0]))
    delays = [2, 2, 1, 3, 0, 0]
    for t, delay in enumerate(delays):
        visits = np.zeros(3)
        visits[t % 3] = 4 + t  # identifies the decision
        writer.record_search(visits, delay)
        segment = writer.step(7 - t, reward=t, next_observation=np.array([t + 1.0]), terminated=t == 5, truncated=False)
    assert segment is not None and segment.terminated and len(segment) == 6
    np.testing.assert_array_equal(segment.actions, [7, 6, 5, 4, 3, 2])
    owner = {}
    for t, delay in enumerate(delays):
        owner[t + delay] = t  # a later decision for the same step replaces an earlier one
    for step in range(6):
        if step in owner:
            assert segment.has_policy[step]
            assert np.argmax(segment.policies[step]) == owner[step] % 3
            assert segment.policies[step].sum() == pytest.approx(1.0)
        else:
            assert not segment.has_policy[step]
    assert set(owner) & set(range(6)) != set(range(6))  # some steps have no search rooted at them


def test_long_episodes_are_cut_into_segments_that_keep_future_policies():
    writer = GameWriter(num_actions=2, segment_length=3)
    writer.start(np.array([0.0]))
    segments = []
    for t in range(7):
        writer.record_search(np.array([1.0, 0.0]) if t % 2 else np.array([0.0, 1.0]), delay=2)
        seg = writer.step(t % 2, 1.0, np.array([t + 1.0]), terminated=False, truncated=t == 6)
        if seg is not None:
            segments.append(seg)
    assert [len(s) for s in segments] == [3, 3, 1]
    assert not any(s.terminated for s in segments)
    np.testing.assert_array_equal(segments[0].observations[:, 0], [0, 1, 2, 3])
    np.testing.assert_array_equal(segments[1].observations[:, 0], [3, 4, 5, 6])
    np.testing.assert_array_equal(segments[0].has_policy, [False, False, True])
    np.testing.assert_array_equal(segments[1].has_policy, [True, True, True])
    assert np.argmax(segments[1].policies[0]) == 0  # step 3 <- decision 1 (odd: action 0 visited)


def test_n_step_value_targets_and_value_prefixes():
    rewards = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=np.float32)
    gamma, n = 0.5, 3
    for terminated in (True, False):
        buffer = PrioritizedGameBuffer(capacity=50)
        game = _game(rewards, terminated)
        buffer.add(game)
        batch = buffer.make_targets(np.array([2]), np.ones(1), _config(), np.random.default_rng(0))
        bootstrap_obs = stack_frames(torch.as_tensor(batch.frames), torch.as_tensor(batch.bootstrap_offset), 1)
        policy_obs = stack_frames(torch.as_tensor(batch.frames), torch.as_tensor(batch.policy_offset), 1)
        length = len(rewards)
        for u in range(6):
            p = 2 + u
            if p < length:
                stop = min(p + n, length)
                expected = sum(rewards[i] * gamma ** (i - p) for i in range(p, stop))
                assert batch.returns[0, u] == pytest.approx(expected)
                disc = 0.0 if (stop == length and terminated) else gamma ** (stop - p)
                assert batch.bootstrap_discount[0, u] == pytest.approx(disc)
                assert bootstrap_obs[0, u, 0] == stop
                assert batch.value_mask[0, u] == 1 and batch.policy_valid[0, u]
            elif p == length:
                assert batch.returns[0, u] == 0 and batch.value_mask[0, u] == 1
                assert batch.bootstrap_discount[0, u] == (0.0 if terminated else 1.0)
            else:
                assert batch.returns[0, u] == 0 and batch.bootstrap_discount[0, u] == 0
                assert batch.value_mask[0, u] == float(terminated) and not batch.policy_valid[0, u]
        np.testing.assert_allclose(batch.target_value_prefix[0], [3, 7, 5, 11, 0])
        np.testing.assert_array_equal(batch.value_prefix_mask[0], [1, 1, 1, 1, float(terminated)])
        np.testing.assert_array_equal(batch.actions[0, :4], game.actions[2:6])
        np.testing.assert_array_equal(batch.consistency_mask[0], [1, 1, 1, 1, 0])
        np.testing.assert_array_equal(policy_obs[0, 1:5, 0], [3, 4, 5, 6])


def test_adaptive_horizon_shortens_for_old_data():
    config = _config(num_unroll_steps=1, td_steps=5, discount=1.0, lstm_horizon=5, auto_td_period=100)
    returns = []
    for total_added in (20, 320, 10_000):
        buffer = PrioritizedGameBuffer(capacity=50)
        buffer.add(_game(np.ones(20, dtype=np.float32), False))
        buffer.total_added = total_added
        returns.append(buffer.make_targets(np.array([0]), np.ones(1), config, np.random.default_rng(0)).returns[0, 0])
    assert returns == [5, 2, 1]


def test_priorities_drive_sampling_and_importance_weights():
    buffer = PrioritizedGameBuffer(capacity=100, alpha=1.0)
    buffer.add(_game(np.zeros(4, np.float32), True))
    buffer.add(_game(np.zeros(4, np.float32), True))
    np.testing.assert_array_equal(buffer.priorities(), np.ones(8))
    slots, _ = buffer.sample_indices(4, np.random.default_rng(0), beta=1.0)
    assert set(slots) <= set(range(8))
    buffer.update_priorities(np.arange(4), np.arange(4), np.array([9.0, 0.0, 0.0, 0.0]))
    assert buffer.priorities()[0] == pytest.approx(9.0 + buffer.eps)
    slots, weights = buffer.sample_indices(20_000, np.random.default_rng(1), beta=1.0)
    total = 9.0 + 4 * 1.0 + 3 * buffer.eps
    assert np.mean(slots == 0) == pytest.approx(9.0 / total, abs=0.015)
    first, other = np.flatnonzero(slots == 0)[0], np.flatnonzero(slots >= 4)[0]
    assert weights[first] / weights[other] == pytest.approx(1.0 / 9.0, rel=1e-3)
    assert weights.max() == pytest.approx(1.0)
    # new data: the maximum of the current priorities, not of all time
    buffer.update_priorities(np.array([0]), np.array([0]), np.array([2.0]))
    buffer.add(_game(np.zeros(2, np.float32), True))
    np.testing.assert_allclose(buffer.priorities()[-2:], 2.0 + buffer.eps)
    # a stale update (slot reused by newer data) is ignored
    buffer.update_priorities(np.array([8]), np.array([3]), np.array([50.0]))
    assert buffer.priorities()[8] == pytest.approx(2.0 + buffer.eps)
    with pytest.raises(ValueError, match="priorities"):
        buffer.update_priorities(np.array([0]), np.array([0]), np.array([np.nan]))


def test_capacity_evicts_the_oldest_segments():
    buffer = PrioritizedGameBuffer(capacity=10)
    for start in range(4):
        buffer.add(_game(np.zeros(4, np.float32), True, start_obs=100 * start))
    assert len(buffer) == 8 and buffer.num_segments == 2 and buffer.total_added == 16
    assert [game.observation(0)[0] for game in buffer.segments()] == [200, 300]
    slots, _ = buffer.sample_indices(500, np.random.default_rng(0), beta=1.0)
    observed = buffer.stacked_observations(slots, np.zeros((500, 1), dtype=np.int64))[:, 0, 0]
    assert set(observed) <= {200, 201, 202, 203, 300, 301, 302, 303}


def test_buffer_round_trips_through_plain_arrays_with_running_segments(tmp_path):
    buffer = PrioritizedGameBuffer(capacity=50, alpha=0.5)
    buffer.add(_game(np.arange(3, dtype=np.float32), True))
    buffer.add(_game(np.arange(5, dtype=np.float32), False))
    buffer.update_priorities(np.array([5]), np.array([5]), np.array([4.0]))
    running = _game(np.arange(2, dtype=np.float32), False, start_obs=50)
    np.savez(tmp_path / "rb.npz", **buffer.state_arrays([running]))
    with np.load(tmp_path / "rb.npz", allow_pickle=False) as arrays:
        loaded = PrioritizedGameBuffer.from_arrays(arrays)
    assert len(loaded) == 10 and loaded.alpha == 0.5 and loaded.total_added == 10
    np.testing.assert_allclose(loaded.priorities(), [*buffer.priorities(), 4.0 + buffer.eps, 4.0 + buffer.eps])
    for a, b in zip([*buffer.segments(), running], loaded.segments()):
        for key in ("frames", "actions", "rewards", "policies", "has_policy", "terminated"):
            np.testing.assert_array_equal(getattr(a, key), getattr(b, key))


def test_bad_segments_are_refused():
    with pytest.raises(ValueError, match="inconsistent"):
        GameSegment(np.zeros((3, 1)), np.zeros(3), np.zeros(3), np.zeros((3, 2)), np.ones(3, bool), True)
    with pytest.raises(ValueError, match="capacity"):
        PrioritizedGameBuffer(0)
    buffer = PrioritizedGameBuffer(capacity=4)
    with pytest.raises(ValueError, match="capacity 4"):
        buffer.add(_game(np.zeros(5, np.float32), True))
    with pytest.raises(ValueError, match="frame_stack=3"):
        GameWriter(2, frame_stack=3).start(np.zeros((4, 2, 2)))


class RandomFrames(gym.Env):
    """Random 6x6 RGB frames; episodes of random length (3 to 12 steps), terminated or truncated."""

    observation_space = spaces.Box(0, 255, (6, 6, 3), np.uint8)
    action_space = spaces.Discrete(3)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(3, 13))
        return self.np_random.integers(0, 256, (6, 6, 3), dtype=np.uint8), {}

    def step(self, action):
        self._left -= 1
        frame = self.np_random.integers(0, 256, (6, 6, 3), dtype=np.uint8)
        end = self._left == 0
        return frame, 0.0, end and action == 0, end and action != 0, {}


def test_rebuilt_stacks_equal_what_the_env_returned_across_episodes_and_segments():
    k = 4
    env = FrameStack(RandomFrames(), k)
    rng = np.random.default_rng(0)
    writer = GameWriter(num_actions=3, segment_length=5, frame_stack=k)
    buffer = PrioritizedGameBuffer(capacity=1000, frame_stack=k)
    seen = []  # per stored segment: the observations the env returned
    obs, _ = env.reset(seed=0)
    writer.start(obs)
    current = [obs]
    for _ in range(300):
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(3)))
        current.append(obs)
        segment = writer.step(0, 0.0, obs, terminated, truncated)
        if segment is not None:
            buffer.add(segment)
            seen.append(np.stack(current))
            current = [obs]
        if terminated or truncated:
            obs, _ = env.reset()
            writer.start(obs)
            current = [obs]
    assert buffer.num_segments > 40 and any(len(s) == 5 for s in buffer.segments())  # episode ends and cuts
    expected = {}  # slot -> observations from there to the segment end
    slot = 0
    for observations in seen:
        for position in range(len(observations) - 1):
            expected[slot + position] = observations[position:]
        slot += len(observations) - 1
    slots = np.array(sorted(expected))
    offsets = np.tile(np.arange(8), (len(slots), 1))
    rebuilt = buffer.stacked_observations(slots, offsets)
    config = TargetConfig(num_unroll_steps=5, td_steps=2, discount=0.9, lstm_horizon=5, auto_td_period=None)
    batch = buffer.make_targets(slots, np.ones(len(slots)), config, rng)
    frames = torch.as_tensor(batch.frames)
    policy_obs = stack_frames(frames, torch.as_tensor(batch.policy_offset), k).numpy()
    bootstrap_obs = stack_frames(frames, torch.as_tensor(batch.bootstrap_offset), k).numpy()
    for row, slot in enumerate(slots):
        truth = expected[slot]
        last = len(truth) - 1
        for offset in range(8):
            np.testing.assert_array_equal(rebuilt[row, offset], truth[min(offset, last)])
        for u in range(6):
            np.testing.assert_array_equal(policy_obs[row, u], truth[min(u, last)])
            np.testing.assert_array_equal(bootstrap_obs[row, u], truth[min(u + 2, last)])


def test_writer_refuses_observations_that_are_not_a_frame_stack():
    writer = GameWriter(num_actions=2, frame_stack=2)
    writer.start(np.zeros((6, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="frame_stack=2"):
        writer.step(0, 0.0, np.ones((6, 4, 4), np.uint8), False, False)


def test_atari_sized_replay_stores_under_31_kb_per_step_and_100k_steps_under_3_gb():
    k, frame, actions = 4, (3, 96, 96), 18
    buffer = PrioritizedGameBuffer(capacity=4000, frame_stack=k)
    rng = np.random.default_rng(0)
    for _ in range(10):
        length = 400
        buffer.add(GameSegment(
            rng.integers(0, 256, (length + k, *frame), dtype=np.uint8), np.zeros(length), np.zeros(length),
            np.full((length, actions), 1 / actions), np.ones(length, bool), False, k,
        ))
    assert len(buffer) == 4000
    assert buffer.nbytes / len(buffer) <= 31 * 1024
    big = PrioritizedGameBuffer(capacity=100_000, frame_stack=k)
    big.add(GameSegment(np.zeros((1 + k, *frame), np.uint8), np.zeros(1), np.zeros(1), np.ones((1, actions)),
                        np.ones(1, bool), False, k))
    assert big.nbytes <= 3e9
