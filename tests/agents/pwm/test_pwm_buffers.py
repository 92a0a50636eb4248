import numpy as np
import pytest
from gymnasium import spaces

from delayzoo.agents.pwm.buffers import SequenceReplayBuffer

IMAGE = spaces.Box(0, 255, (1, 4, 4), np.uint8)


def fill(buffer, steps, start=0, done_every=None, infos=None):
    for t in range(start, start + steps):
        obs = np.full((buffer.n_envs, 1, 4, 4), t % 256, dtype=np.uint8)
        done = np.array([done_every is not None and (t + 1) % done_every == 0] * buffer.n_envs)
        buffer.add(
            obs,
            obs,
            np.full(buffer.n_envs, t % 3),
            np.full(buffer.n_envs, float(t)),
            done,
            infos or [{} for _ in range(buffer.n_envs)],
        )


def test_frames_stay_uint8_and_windows_are_consecutive():
    buffer = SequenceReplayBuffer(50, IMAGE, spaces.Discrete(3), device="cpu")
    fill(buffer, 30)
    batch = buffer.sample(8, 6, np.random.default_rng(0))
    assert batch.observations.dtype.is_floating_point is False and batch.observations.shape == (8, 6, 1, 4, 4)
    rewards = batch.rewards.numpy()
    np.testing.assert_array_equal(np.diff(rewards, axis=1), 1.0)
    np.testing.assert_array_equal(batch.observations[:, :, 0, 0, 0].numpy(), rewards.astype(np.uint8))


def test_windows_never_cross_the_write_position_after_wrapping():
    buffer = SequenceReplayBuffer(20, IMAGE, spaces.Discrete(3), device="cpu")
    fill(buffer, 47)  # wrapped twice; the ring holds steps 27..46 and pos sits between 46 and 27
    assert buffer.full and buffer.stored_steps() == 20
    seen = set()
    rng = np.random.default_rng(1)
    for _ in range(50):
        rewards = buffer.sample(16, 5, rng).rewards.numpy()
        np.testing.assert_array_equal(np.diff(rewards, axis=1), 1.0)
        assert rewards.min() >= 27 and rewards.max() <= 46
        seen.update(rewards[:, 0].tolist())
    assert seen == set(float(t) for t in range(27, 43))  # every valid start, and only those


def test_episode_flags_follow_done_truncation_and_life_loss():
    buffer = SequenceReplayBuffer(
        10, spaces.Box(-1, 1, (2,), np.float32), spaces.Box(-1, 1, (1,), np.float32), device="cpu"
    )
    infos = [{}, {"life_loss": True}, {}, {"TimeLimit.truncated": True}, {}]
    dones = [False, False, True, True, False]
    for info, done in zip(infos, dones):
        buffer.add(np.zeros((1, 2)), np.zeros((1, 2)), np.zeros((1, 1)), np.zeros(1), np.array([done]), [info])
    np.testing.assert_array_equal(buffer.is_first[:5, 0], [True, False, True, True, True])
    np.testing.assert_array_equal(buffer.terminals[:5, 0], [False, True, True, False, False])


def test_rejects_non_finite_rewards_and_windows_longer_than_the_data():
    buffer = SequenceReplayBuffer(10, IMAGE, spaces.Discrete(3), device="cpu")
    with pytest.raises(ValueError, match="nan"):
        buffer.add(np.zeros((1, 1, 4, 4)), None, np.zeros(1), np.array([np.nan]), np.array([False]), [{}])
    fill(buffer, 3)
    with pytest.raises(ValueError, match="4 steps from 3"):
        buffer.sample(2, 4)


def test_save_load_round_trip_and_mismatch(tmp_path):
    space = spaces.Dict({"image": IMAGE, "delay": spaces.Discrete(4)})
    buffer = SequenceReplayBuffer(12, space, spaces.Discrete(3), device="cpu", n_envs=2)
    for t in range(9):
        obs = {"image": np.full((2, 1, 4, 4), t, np.uint8), "delay": np.array([t % 4, (t + 1) % 4])}
        buffer.add(
            obs, obs, np.array([t % 3, 0]), np.array([t, -t], dtype=np.float32), np.array([t == 4, False]), [{}, {}]
        )
    buffer.save(tmp_path / "buffer.npz")
    restored = SequenceReplayBuffer(12, space, spaces.Discrete(3), device="cpu", n_envs=2)
    restored.load(tmp_path / "buffer.npz")
    assert (restored.pos, restored.full) == (buffer.pos, buffer.full)
    for key in ("image", "delay"):
        np.testing.assert_array_equal(restored.observations[key], buffer.observations[key])
    np.testing.assert_array_equal(restored.is_first, buffer.is_first)
    np.testing.assert_array_equal(restored.rewards, buffer.rewards)
    other = SequenceReplayBuffer(12, space, spaces.Discrete(3), device="cpu", n_envs=3)
    with pytest.raises(ValueError, match="does not match"):
        other.load(tmp_path / "buffer.npz")


@pytest.mark.parametrize(
    "name, value, message",
    [
        ("pos", np.int64(6), r"write position 6 is not an integer in \[0, 5\]"),
        ("pos", np.int64(-1), r"write position -1 is not an integer in \[0, 5\]"),
        ("pos", np.float64(2.0), "write position 2.0 is not an integer"),
        ("full", np.int64(3), "'full' is 3, not a boolean"),
        ("next_is_first", np.ones(3, bool), r"'next_is_first' is \(3,\) bool, expected \(2,\) bool"),
    ],
)
def test_load_refuses_a_write_position_or_flags_that_do_not_fit(name, value, message, tmp_path):
    buffer = SequenceReplayBuffer(12, IMAGE, spaces.Discrete(3), device="cpu", n_envs=2)
    fill(buffer, 4)
    buffer.save(tmp_path / "buffer.npz")
    with np.load(tmp_path / "buffer.npz") as data:
        arrays = {key: data[key] for key in data.files}
    np.savez(tmp_path / "crafted.npz", **{**arrays, name: value})
    restored = SequenceReplayBuffer(12, IMAGE, spaces.Discrete(3), device="cpu", n_envs=2)
    with pytest.raises(ValueError, match=message):
        restored.load(tmp_path / "crafted.npz")
    assert restored.pos == 0 and not restored.observations[None].any()  # nothing was changed
