"""ExecutionDelay under Gymnasium's own vector envs: fixed-shape infos, one seeded delay path per env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

MAX_DELAY = 4


def make_delayed() -> gym.Env:
    """A delayed CartPole with a random-walk delay (module level, so that AsyncVectorEnv can pickle it)."""
    return PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(MAX_DELAY, p=0.4)))


def delay_paths(vector_class: type, seed: int, steps: int = 60) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Delays, padded pending actions and executed actions of 3 envs over ``steps`` steps."""
    envs = vector_class([make_delayed for _ in range(3)])
    try:
        obs, info = envs.reset(seed=seed)
        assert info["pending_actions"].shape == (3, MAX_DELAY)
        assert obs["pending_actions"].shape == (3, MAX_DELAY)
        delays, pending, executed = [info["delay"]], [info["pending_actions"]], []
        rng = np.random.default_rng(0)
        for _ in range(steps):
            _, _, _, _, info = envs.step(rng.integers(0, 2, size=3))
            delays.append(info["delay"])
            pending.append(info["pending_actions"])
            executed.append(info["executed_action"])
        return np.array(delays), np.array(pending), np.array(executed)
    finally:
        envs.close()


@pytest.mark.parametrize("vector_class", [gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv], ids=["sync", "async"])
def test_delayed_envs_step_in_gymnasium_vector_envs_with_per_env_seeded_delays(vector_class):
    delays, pending, executed = delay_paths(vector_class, seed=7)
    assert delays.shape == (61, 3) and pending.shape == (61, 3, MAX_DELAY) and executed.shape == (60, 3)
    assert len({tuple(delays[:, env]) for env in range(3)}) == 3  # each env follows its own delay path
    assert delays.min() >= 0 and delays.max() <= MAX_DELAY and len(np.unique(delays)) > 1
    for t, env in np.ndindex(delays.shape):  # the rows past the delay are padding
        assert not pending[t, env, delays[t, env]:].any()
    again, _, _ = delay_paths(vector_class, seed=7)
    np.testing.assert_array_equal(delays, again)
    assert not np.array_equal(delays, delay_paths(vector_class, seed=8)[0])


def test_sync_and_async_vector_envs_give_the_same_delays():
    np.testing.assert_array_equal(
        delay_paths(gym.vector.SyncVectorEnv, seed=3)[0], delay_paths(gym.vector.AsyncVectorEnv, seed=3)[0]
    )
