import numpy as np
import pytest

from delayzoo.agents.delayed_ez.replay import GameSegment, GameWriter, PrioritizedGameBuffer, make_targets


def _game(rewards, terminated, num_actions=2, start_obs=0.0):
    length = len(rewards)
    obs = (start_obs + np.arange(length + 1, dtype=np.float32)).reshape(-1, 1)
    policies = np.tile(np.eye(num_actions, dtype=np.float32)[0], (length, 1))
    actions = np.arange(length) % num_actions
    return GameSegment(obs, actions, np.asarray(rewards), policies, np.ones(length, bool), terminated)


def test_search_policy_is_paired_with_the_observation_it_was_rooted_at():
    writer = GameWriter(num_actions=3, segment_length=100)
    writer.start(np.array([0.0]))
    delays = [2, 2, 1, 3, 0, 0]
    for t, delay in enumerate(delays):
        visits = np.zeros(3)
        visits[t % 3] = 4 + t  # identifies the decision
        writer.record_search(visits, delay)
        segment = writer.step(executed_action=7 - t, reward=t, next_observation=np.array([t + 1.0]), terminated=t == 5,
                              truncated=False)
    assert segment is not None and segment.terminated and len(segment) == 6
    np.testing.assert_array_equal(segment.actions, [7, 6, 5, 4, 3, 2])  # the executed actions
    # decision t searched from step t + d_t (decision 3 is rooted beyond the end of the episode)
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
    # step s got the search of decision s - 2
    np.testing.assert_array_equal(segments[0].has_policy, [False, False, True])
    np.testing.assert_array_equal(segments[1].has_policy, [True, True, True])
    assert np.argmax(segments[1].policies[0]) == 0  # step 3 <- decision 1 (odd: action 0 visited)


def test_n_step_value_targets_and_value_prefixes():
    rewards = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], dtype=np.float32)
    gamma, n = 0.5, 3
    for terminated in (True, False):
        game = _game(rewards, terminated)
        batch = make_targets([game], np.array([2]), np.ones(1), 5, n, gamma, 2, np.random.default_rng(0))
        length = len(rewards)
        for u in range(6):
            p = 2 + u
            if p < length:
                stop = min(p + n, length)
                expected = sum(rewards[i] * gamma ** (i - p) for i in range(p, stop))
                assert batch.returns[0, u] == pytest.approx(expected)
                disc = 0.0 if (stop == length and terminated) else gamma ** (stop - p)
                assert batch.bootstrap_discount[0, u] == pytest.approx(disc)
                assert batch.bootstrap_obs[0, u, 0] == stop
                assert batch.value_mask[0, u] == 1 and batch.policy_valid[0, u]
            elif p == length:
                assert batch.returns[0, u] == 0 and batch.value_mask[0, u] == 1
                assert batch.bootstrap_discount[0, u] == (0.0 if terminated else 1.0)
            else:
                assert batch.returns[0, u] == 0 and batch.bootstrap_discount[0, u] == 0
                assert batch.value_mask[0, u] == float(terminated) and not batch.policy_valid[0, u]
        # value prefix: cumulative rewards since the last LSTM reset (every 2 unroll steps)
        np.testing.assert_allclose(batch.target_value_prefix[0], [3, 7, 5, 11, 0])
        np.testing.assert_array_equal(batch.value_prefix_mask[0], [1, 1, 1, 1, float(terminated)])
        np.testing.assert_array_equal(batch.actions[0, :4], game.actions[2:6])
        np.testing.assert_array_equal(batch.consistency_mask[0], [1, 1, 1, 1, 0])
        np.testing.assert_array_equal(batch.target_obs[0, :4, 0], [3, 4, 5, 6])


def test_adaptive_horizon_shortens_for_old_data():
    game = _game(np.ones(20, dtype=np.float32), False)
    game.start_id = 0
    kwargs = dict(num_unroll_steps=0, td_steps=5, discount=1.0, lstm_horizon=5, rng=np.random.default_rng(0))
    fresh = make_targets([game], np.array([0]), np.ones(1), total_added=20, auto_td_period=100, **kwargs)
    old = make_targets([game], np.array([0]), np.ones(1), total_added=320, auto_td_period=100, **kwargs)
    ancient = make_targets([game], np.array([0]), np.ones(1), total_added=10_000, auto_td_period=100, **kwargs)
    assert fresh.returns[0, 0] == 5 and old.returns[0, 0] == 2 and ancient.returns[0, 0] == 1


def test_priorities_drive_sampling_and_importance_weights():
    buffer = PrioritizedGameBuffer(capacity=100, alpha=1.0)
    buffer.add(_game(np.zeros(4, np.float32), True))
    buffer.add(_game(np.zeros(4, np.float32), True))
    assert all((g.priorities == 1.0).all() for g in buffer.games)
    games, positions, _ = buffer.sample_indices(4, np.random.default_rng(0), beta=1.0)
    buffer.update_priorities([buffer.games[0]] * 4, np.arange(4), np.array([9.0, 0.0, 0.0, 0.0]))
    assert buffer.games[0].priorities[0] == pytest.approx(9.0 + buffer.eps)
    assert buffer.max_priority == pytest.approx(9.0 + buffer.eps)
    games, positions, weights = buffer.sample_indices(20_000, np.random.default_rng(1), beta=1.0)
    hits = np.mean([(g is buffer.games[0]) and p == 0 for g, p in zip(games, positions)])
    total = 9.0 + 4 * 1.0 + 3 * buffer.eps
    assert hits == pytest.approx(9.0 / total, abs=0.015)
    first = next(i for i, (g, p) in enumerate(zip(games, positions)) if g is buffer.games[0] and p == 0)
    other = next(i for i, g in enumerate(games) if g is buffer.games[1])
    # (N P(i))^-beta / max: the most likely sample has the smallest weight
    assert weights[first] / weights[other] == pytest.approx(1.0 / 9.0, rel=1e-3)
    assert weights.max() == pytest.approx(1.0)
    buffer.add(_game(np.zeros(2, np.float32), True))
    assert (buffer.games[-1].priorities == buffer.max_priority).all()
    with pytest.raises(ValueError, match="priorities"):
        buffer.update_priorities([buffer.games[0]], np.array([0]), np.array([np.nan]))


def test_capacity_evicts_the_oldest_segments():
    buffer = PrioritizedGameBuffer(capacity=10)
    for start in range(4):
        buffer.add(_game(np.zeros(4, np.float32), True, start_obs=100 * start))
    assert len(buffer) == 8 and len(buffer.games) == 2
    assert buffer.games[0].observations[0, 0] == 200 and buffer.total_added == 16


def test_buffer_round_trips_through_plain_arrays(tmp_path):
    buffer = PrioritizedGameBuffer(capacity=50, alpha=0.5)
    buffer.add(_game(np.arange(3, dtype=np.float32), True))
    buffer.add(_game(np.arange(5, dtype=np.float32), False))
    buffer.update_priorities([buffer.games[1]], np.array([2]), np.array([4.0]))
    np.savez(tmp_path / "rb.npz", **buffer.state_arrays())
    with np.load(tmp_path / "rb.npz", allow_pickle=False) as arrays:
        loaded = PrioritizedGameBuffer.from_arrays(arrays)
    assert len(loaded) == 8 and loaded.alpha == 0.5 and loaded.max_priority == buffer.max_priority
    for a, b in zip(buffer.games, loaded.games):
        for key, value in a.to_arrays().items():
            np.testing.assert_array_equal(value, b.to_arrays()[key])


def test_bad_segments_are_refused():
    with pytest.raises(ValueError, match="inconsistent"):
        GameSegment(np.zeros((3, 1)), np.zeros(3), np.zeros(3), np.zeros((3, 2)), np.ones(3, bool), True)
    with pytest.raises(ValueError, match="capacity"):
        PrioritizedGameBuffer(0)
