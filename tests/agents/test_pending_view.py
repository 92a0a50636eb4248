"""The agents' reader of the pending view, with and without an observation delay."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from delayzoo.agents.common.pending import read_pending_view
from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation

ACTIONS = spaces.Discrete(4)


def batch(pending: list[list[int]], delays: list[int], obs_delays: list[int] | None = None) -> dict[str, torch.Tensor]:
    obs = {
        "observation": torch.zeros(len(delays), 2),
        "pending_actions": torch.tensor(pending),
        "delay": torch.tensor(delays),
    }
    if obs_delays is not None:
        obs["obs_delay"] = torch.tensor(obs_delays)
    return obs


def test_without_obs_delay_the_reader_gives_zeros_and_masks_past_the_delay():
    view = read_pending_view(batch([[1, 2, 3], [3, 3, 3]], [2, 0]), ACTIONS)
    assert view.actions.tolist() == [[1, 2, 0], [0, 0, 0]]
    assert view.delays.tolist() == [2, 0] and view.obs_delays.tolist() == [0, 0]


def test_with_obs_delay_the_reader_keeps_obs_delay_plus_delay_entries():
    view = read_pending_view(batch([[1, 2, 3, 1], [3, 2, 1, 3]], [1, 0], [2, 1]), ACTIONS)
    assert view.actions.tolist() == [[1, 2, 3, 0], [3, 0, 0, 0]]
    assert view.delays.tolist() == [1, 0] and view.obs_delays.tolist() == [2, 1]


def test_a_view_of_both_delays_reads_as_the_wrapper_shows_it():
    env = PendingActionsObservation(ObservationDelay(ExecutionDelay(gym.make("CartPole-v1"), 2), 2))
    env.reset(seed=0)
    for action in (1, 1, 0):
        obs, *_ = env.step(action)
    tensors = {key: torch.as_tensor(np.asarray(value))[None] for key, value in obs.items()}
    view = read_pending_view(tensors, env.action_space)
    assert (int(view.obs_delays[0]), int(view.delays[0])) == (2, 2)
    # executed 0, 0 (fillers), 1: steps 2 and 3 unobserved (0, 1), then a_1 = 1 and a_2 = 0 queued
    assert view.actions[0].tolist() == obs["pending_actions"].tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize(
    "obs, fragment",
    [
        (batch([[1, 2]], [3]), "delay 3 of env 0 is outside [0, 2]"),
        (batch([[1, 2], [1, 2]], [1, 1], [0, 2]), "obs_delay 2 + delay 1 of env 1 is outside [0, 2]"),
        (batch([[1, 2]], [0], [-1]), "obs_delay -1 + delay 0 of env 0"),
        (batch([[1, 9]], [1], [1]), "pending action 9 of env 0 (position 1"),
    ],
)
def test_bad_views_raise_naming_the_env_and_value(obs, fragment):
    with pytest.raises(ValueError) as raised:
        read_pending_view(obs, ACTIONS)
    assert fragment in str(raised.value)
