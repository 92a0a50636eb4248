"""Today's numbers of short fixed-seed DelayedEZ runs, pinned so that moving code around cannot change them.

Each run trains a tiny model on CartPole-v1 (undelayed, and under a random-walk delay with the forward model),
with the targets computed in the update and in the reanalysis worker process, and records what training
produced: the losses logged after every round, the policy targets the searches stored in the replay (and the
replay's other arrays), the trained weights and the returns of deterministic evaluation episodes.
``pinned_dez.json`` holds the record of the code the numbers were first taken from (its commit is in the
file); the tests compare a new run with it, floats to 1e-6 relative (summation order on another CPU), the
rest exactly. Runs on Ray actors depend on timing and are not pinned here.

To take the numbers again after a change that is meant to alter training, run this file with
``DELAYZOO_PIN=write`` and say why in the commit.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

PINNED = pathlib.Path(__file__).with_name("pinned_dez.json")
NET = dict(latent_dim=8, hidden=(16,), head_hidden=(8,), lstm_hidden_size=8, proj_hidden=8, proj_out=8,
           pred_hidden=4, support_size=10, hidden_norm="layer")
SETTINGS = dict(
    buffer_size=2000, learning_starts=64, batch_size=16, num_simulations=4, num_unroll_steps=3, td_steps=3,
    reanalyze_ratio=0.5, target_update_interval=10, lr_warmup_steps=10, learning_rate=0.01, gamma=0.97,
    search_kwargs=dict(q_normalization="parent_siblings"), seed=0, device="cpu",
    policy_kwargs=dict(net_kwargs=NET, optimizer_class=torch.optim.Adam),
)
STEPS = 224
CASES = {
    "undelayed-inline": (0, False),
    "undelayed-process": (0, "process"),
    "delayed-inline": (3, False),
    "delayed-process": (3, "process"),
}
"""Case name -> (the random walk's maximum delay, ``prefetch``)."""


def make_env(max_delay: int) -> gym.Env:
    env: gym.Env = gym.make("CartPole-v1")
    if max_delay:
        env = PendingActionsObservation(ExecutionDelay(env, RandomWalkDelay(max_delay, p=0.2), init_action="random"))
    return Monitor(env)


class RoundLosses(BaseCallback):
    """The losses the logger holds at the start of each rollout: those of the round just trained."""

    def __init__(self) -> None:
        super().__init__()
        self.rounds: list[list[float]] = []

    def _on_rollout_start(self) -> None:
        values = self.model.logger.name_to_value
        if "train/loss" in values:
            self.rounds.append([float(values[f"train/{name}"]) for name in
                                ("loss", "value_loss", "value_prefix_loss", "policy_loss", "consistency_loss")])

    def _on_step(self) -> bool:
        return True


def _digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def record(max_delay: int, prefetch: Any) -> dict[str, Any]:
    """Train one pinned run and return what it produced (see the module docstring)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = "MultiInputPolicy" if max_delay else "MlpPolicy"
        model = DelayedEZ(policy, make_env(max_delay), prefetch=prefetch, **SETTINGS)
        losses = RoundLosses()
        model.learn(STEPS, callback=losses)
        buffer = io.BytesIO()
        model.save_replay_buffer(buffer)
        buffer.seek(0)
        with np.load(buffer) as arrays:
            replay = {name: _digest(arrays[name]) for name in sorted(arrays.files) if name != "format"}
            policies = arrays["policies"].astype(np.float64)
        weights = {name: float(value.double().abs().sum()) for name, value in model.policy.network.state_dict().items()
                   if value.is_floating_point()}
        env = make_env(max_delay)
        env.reset(seed=1000)
        returns, _ = evaluate_policy(model, env, n_eval_episodes=3, deterministic=True, return_episode_rewards=True)
        return {
            "losses": losses.rounds,
            "updates": model._n_updates,
            "stored_policies": {"sum": float(policies.sum()), "squares": float((policies**2).sum()),
                                "rows": int(len(policies))},
            "replay": replay,
            "weights": weights,
            "returns": [float(value) for value in returns],
        }
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def pinned() -> dict[str, Any]:
    if os.environ.get("DELAYZOO_PIN") == "write":
        from delayzoo.version import source_commit

        recorded = {"commit": source_commit(), **{name: record(*case) for name, case in CASES.items()}}
        PINNED.write_text(json.dumps(recorded, indent=1) + "\n")
    return json.loads(PINNED.read_text())


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_short_run_trains_exactly_as_pinned(name, pinned):
    expected, got = pinned[name], record(*CASES[name])
    assert got["updates"] == expected["updates"] and len(got["losses"]) == len(expected["losses"])
    np.testing.assert_allclose(got["losses"], expected["losses"], rtol=1e-6, atol=1e-9, err_msg="round losses")
    for key in ("sum", "squares"):
        np.testing.assert_allclose(got["stored_policies"][key], expected["stored_policies"][key], rtol=1e-6)
    assert got["stored_policies"]["rows"] == expected["stored_policies"]["rows"]
    # the replay's actions, rewards, frames and episode structure, bit for bit (its policies above, to 1e-6)
    for array in set(expected["replay"]) - {"policies", "priorities"}:
        assert got["replay"][array] == expected["replay"][array], f"replay array {array!r} differs"
    assert sorted(got["weights"]) == sorted(expected["weights"])
    for parameter, value in expected["weights"].items():
        np.testing.assert_allclose(got["weights"][parameter], value, rtol=1e-5, err_msg=parameter)
    assert got["returns"] == expected["returns"]

