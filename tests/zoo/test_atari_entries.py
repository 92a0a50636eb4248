"""Every Atari entry of the hyperparameter files trains a few steps through the zoo, delayed, with and
without the pending view (frames are stacked below it by ``make_atari``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from delayzoo.zoo import train
from delayzoo.zoo.hyperparams import hyperparams_dir, load_hyperparams_file

TINY = {
    "dqn": ["buffer_size:64", "learning_starts:12", "batch_size:4"],
    "qrdqn": ["buffer_size:64", "learning_starts:12", "batch_size:4", "policy_kwargs:dict(n_quantiles=5)"],
    "ppo": ["n_envs:1", "n_steps:8", "batch_size:8", "n_epochs:1"],
    "pwm": [
        "learning_starts:8", "batch_size:2", "sequence_length:4", "imagination_horizon:2", "buffer_size:64",
        "policy_kwargs:dict(world_model_kwargs=dict(stoch=4, classes=4, cnn_channels=(4, 4, 4, 4), mlp_units=16,"
        " mlp_layers=1, seq_width=16, seq_cells=1, seq_divisor=2, reward_bins=21),"
        " actor_critic_kwargs=dict(units=16, layers=1, value_bins=21))",
    ],
    "delayed_ez": [
        "learning_starts:8", "batch_size:4", "num_simulations:2", "buffer_size:64",
        "replay_buffer_kwargs:dict(segment_length=6)", "final_updates:2", "lr_warmup_steps:2",
        "policy_kwargs:dict(net_kwargs=dict(num_channels=4, num_blocks=1, reduced_channels=2, head_hidden=(8,),"
        " lstm_hidden_size=8, proj_hidden=8, proj_out=8, pred_hidden=4, support_size=10))",
    ],
}
"""Tiny model and budget overrides per algorithm (``-params``); the env settings stay the entry's."""

STEPS = 16


def _atari_algos() -> list[str]:
    return sorted(path.stem for path in hyperparams_dir().glob("*.yml") if "atari" in load_hyperparams_file(path))


def test_every_atari_entry_has_a_tiny_override():
    assert set(_atari_algos()) == set(TINY)


def _train(algo: str, folder: Path, pending_view: bool, delayed: bool = True) -> Path:
    delay = ["--delay", "3", "--delay-process", "random-walk"] if delayed else []
    delay += ["--pending-view"] if pending_view else []
    threads = torch.get_num_threads()
    try:
        code = train.main(
            ["--algo", algo, "--env", "ALE/Pong-v5", "-n", str(STEPS), "--seed", "0", "--eval-freq", "-1",
             "--num-threads", "1", "-f", str(folder), *delay, "-params", *TINY[algo]]
        )
    finally:
        torch.set_num_threads(threads)
    assert code == 0
    return folder / algo / "ALE-Pong-v5_1"


def _check_run(run: Path, pending_view: bool, delayed: bool = True) -> None:
    assert (run / "ALE-Pong-v5.zip").is_file()
    args = [line.strip() for line in (run / "ALE-Pong-v5" / "args.yml").read_text().splitlines()]
    # read as text: the tiny policy_kwargs hold tuples, which the plain YAML reader refuses
    assert args[args.index("- - delay") + 1] == ("- 3" if delayed else "- null")
    assert args[args.index("- - pending_view") + 1] == f"- {str(pending_view).lower()}"
    stack = load_hyperparams_file(hyperparams_dir() / f"{run.parent.name}.yml")["atari"].get("frame_stack")
    if stack:
        assert f"frame_stack: {stack}" in (run / "ALE-Pong-v5" / "config.yml").read_text()


@pytest.mark.parametrize("algo", sorted(TINY))
def test_atari_entry_trains_under_delay_with_the_pending_view(algo, tmp_path):
    _check_run(_train(algo, tmp_path, pending_view=True), pending_view=True)


@pytest.mark.slow
@pytest.mark.parametrize("algo", sorted(TINY))
def test_atari_entry_trains_without_the_pending_view(algo, tmp_path):
    # DelayedEZ refuses a delay it cannot see (tests/agents/delayed_ez): its entry runs undelayed here
    delayed = algo != "delayed_ez"
    _check_run(_train(algo, tmp_path, pending_view=False, delayed=delayed), pending_view=False, delayed=delayed)
