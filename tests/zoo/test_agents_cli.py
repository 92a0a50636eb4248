"""Our agents through the zoo: a tiny delayed CartPole run per agent (subprocess), then its evaluation."""

from __future__ import annotations

import csv

import pytest

from delayzoo.zoo import eval as zoo_eval
from delayzoo.zoo.algos import load_algorithm
from delayzoo.zoo.runs import read_run_yaml
from tests.zoo.helpers import run_module

TINY = {
    "pwm": """CartPole-v1:
  policy: MlpPolicy
  n_timesteps: 48
  buffer_size: 400
  learning_starts: 24
  batch_size: 3
  sequence_length: 8
  imagination_horizon: 3
  policy_kwargs: "dict(world_model_kwargs=dict(stoch=4, classes=4, cnn_channels=(4, 8), mlp_units=16, mlp_layers=1,
    seq_width=16, seq_cells=1, seq_divisor=2, reward_bins=21),
    actor_critic_kwargs=dict(units=16, layers=1, value_bins=21))"
""",
    "delayed_ez": """CartPole-v1:
  policy: MlpPolicy
  n_timesteps: 48
  learning_starts: 16
  batch_size: 4
  num_simulations: 3
  replay_buffer_kwargs: {segment_length: 8}
  lr_warmup_steps: 10
  reanalyze_ratio: 0.5
  target_update_interval: 5
  policy_kwargs: "dict(net_kwargs=dict(latent_dim=8, hidden=(16,), head_hidden=(8,), lstm_hidden_size=8, proj_hidden=8,
    proj_out=8, pred_hidden=4, support_size=10))"
""",
}
"""Tiny versions of the agents (the sizes of their own unit tests), as -conf files."""


@pytest.mark.parametrize("algo", sorted(TINY))
def test_agent_trains_under_delay_through_the_zoo_and_evaluates(algo, tmp_path):
    algorithm = load_algorithm(algo)
    (tmp_path / "tiny.yml").write_text(TINY[algo])
    result = run_module(
        "delayzoo.zoo.train", "--algo", algo, "--env", "CartPole-v1", "-conf", "tiny.yml", "--seed", "0",
        "--delay", "2", "--delay-process", "random-walk", "--pending-view", "--eval-freq", "-1", "--save-freq", "24",
        "--num-threads", "1", "-f", "logs", cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "logs" / algo / "CartPole-v1_1"
    model = algorithm.load(run / "CartPole-v1.zip", device="cpu")
    assert model.num_timesteps == 48
    config = read_run_yaml(run / "CartPole-v1" / "config.yml")
    assert config["policy"] == "MultiInputPolicy" and config["delay"]["delay"] == 2
    if algo == "pwm":  # --pending-view: forecast mode, recorded like any hyperparameter
        assert config["delay_mode"] == "forecast" and model.delay_mode == "forecast"
    assert (run / "0.monitor.csv").read_text().startswith('#{"t_start"')

    assert zoo_eval.main(["--algo", algo, "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "2"]) == 0
    with open(tmp_path / "logs" / "eval_result" / algo / "CartPole-v1_1.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["step", "episode_0", "episode_1"] and [row[0] for row in rows[1:]] == ["24", "48"]


MINATAR_TINY = {
    "ppo": ["n_envs:2", "n_steps:32", "batch_size:32", "n_epochs:1"],
    "pwm": ["learning_starts:40", "batch_size:2", "sequence_length:8", "imagination_horizon:3"],
    "delayed_ez": ["n_envs:2", "learning_starts:40", "batch_size:4", "num_simulations:2",
                   "replay_buffer_kwargs:dict(segment_length=8)"],
}
"""The shipped MinAtar entries (their networks included), with budgets shrunk for a smoke run."""


@pytest.mark.parametrize("algo", sorted(MINATAR_TINY))
def test_minatar_entry_trains_with_and_without_the_pending_view_and_evaluates(algo, tmp_path):
    pytest.importorskip("minatar")
    for name, view in (("view", ["--delay", "3", "--delay-process", "random-walk", "--pending-view"]), ("plain", [])):
        result = run_module(
            "delayzoo.zoo.train", "--algo", algo, "--env", "MinAtar/Breakout-v1", "-n", "64", "--seed", "0",
            *view, "--eval-freq", "-1", "--num-threads", "1", "-f", name, "-params", *MINATAR_TINY[algo], cwd=tmp_path,
        )
        assert result.returncode == 0, result.stderr[-3000:]
        config = read_run_yaml(tmp_path / name / algo / "MinAtar-Breakout-v1_1" / "MinAtar-Breakout-v1" / "config.yml")
        assert config["policy"] == ("MultiInputPolicy" if view else {"pwm": "MlpPolicy"}.get(algo, "CnnPolicy"))
        logs = str(tmp_path / name)
        assert zoo_eval.main(["--algo", algo, "--env", "MinAtar/Breakout-v1", "-f", logs, "-n", "1"]) == 0
