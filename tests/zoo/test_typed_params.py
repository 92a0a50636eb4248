"""A hyperparameter typed as a Python expression on the command line (``-params policy_kwargs:dict(activation_fn=
nn.ReLU)``, which rl_zoo3 evaluates) is recorded in the run files as the text typed, so that the zoo's own eval,
enjoy and a resume read the run without ``--trust-run-files``; a run folder written with Python tags is refused
with a message that says how to repair it."""

from __future__ import annotations

import csv
import shutil

import pytest
import yaml

from delayzoo.zoo import enjoy, train
from delayzoo.zoo import eval as zoo_eval
from delayzoo.zoo.runs import is_plain_data, read_run_yaml
from tests.zoo.helpers import run_module

TYPED = {
    "ppo": ["n_envs:1", "n_steps:64", "batch_size:64", "n_epochs:1",
            "policy_kwargs:dict(activation_fn=nn.ReLU, net_arch=[16, 16], optimizer_class=th.optim.Adam)"],
    "pwm": ["buffer_size:400", "learning_starts:24", "batch_size:3", "sequence_length:8", "imagination_horizon:3",
            "policy_kwargs:dict(world_model_kwargs=dict(stoch=4, classes=4, cnn_channels=(4, 8), mlp_units=16, "
            "mlp_layers=1, seq_width=16, seq_cells=1, seq_divisor=2, reward_bins=21), "
            "actor_critic_kwargs=dict(units=16, layers=1, value_bins=21))"],
    "delayed_ez": ["learning_starts:16", "batch_size:4", "num_simulations:3",
                   "replay_buffer_kwargs:dict(segment_length=8)", "lr_warmup_steps:10",
                   "policy_kwargs:dict(net_kwargs=dict(latent_dim=8, hidden=(16,), head_hidden=(8,), "
                   "lstm_hidden_size=8, proj_hidden=8, proj_out=8, pred_hidden=4, support_size=10), "
                   "optimizer_class=th.optim.Adam)"],
}
"""Tiny settings of each algorithm, their policy_kwargs typed with classes or tuples (not plain YAML data)."""


def test_plain_data_is_what_a_safe_yaml_reader_builds():
    assert is_plain_data({"a": [1, 2.5, None, True, "x", {"b": []}]})
    assert not is_plain_data({"a": (1, 2)}) and not is_plain_data([int]) and not is_plain_data({1: "x"})


@pytest.mark.parametrize("algo", sorted(TYPED))
def test_train_eval_enjoy_and_resume_read_a_run_whose_policy_kwargs_were_typed(algo, tmp_path):
    steps = "64" if algo == "ppo" else "48"
    result = run_module(
        "delayzoo.zoo.train", "--algo", algo, "--env", "CartPole-v1", "-n", steps, "--seed", "0", "--eval-freq",
        "-1", "--save-freq", "24", "--num-threads", "1", "-f", "logs", "-params", *TYPED[algo], cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    params = tmp_path / "logs" / algo / "CartPole-v1_1" / "CartPole-v1"
    typed = TYPED[algo][-1].split(":", 1)[1]
    for name in ("args.yml", "config.yml"):
        text = (params / name).read_text()
        assert "!!python/name" not in text and "!!python/tuple" not in text, text
    assert read_run_yaml(params / "config.yml")["policy_kwargs"] == typed
    assert read_run_yaml(params / "args.yml")["hyperparams"]["policy_kwargs"] == typed

    logs = str(tmp_path / "logs")
    output = tmp_path / "scores.csv"
    common = ["--algo", algo, "--env", "CartPole-v1", "--num-threads", "1"]
    assert zoo_eval.main([*common, "-f", logs, "-n", "1", "--checkpoints", "last", "-o", str(output)]) == 0
    assert len(list(csv.reader(output.open()))) == 2
    assert enjoy.main([*common, "-f", logs, "-n", "20", "--no-render"]) == 0
    model = params.parent / "CartPole-v1.zip"
    resumed = ["-i", str(model), "-n", "24", "--eval-freq", "-1", "-f", logs, "-params", *TYPED[algo]]
    assert train.main([*common, *resumed]) == 0
    assert read_run_yaml(tmp_path / "logs" / algo / "CartPole-v1_2" / "CartPole-v1" / "config.yml")


def test_a_run_folder_written_with_python_tags_is_refused_saying_how_to_repair_it(ppo_run, tmp_path, capsys):
    run = tmp_path / "logs" / "ppo" / "CartPole-v1_1"
    shutil.copytree(ppo_run / "logs" / "ppo" / "CartPole-v1_1", run)
    config = run / "CartPole-v1" / "config.yml"
    content = yaml.safe_load(config.read_text())
    content.pop("policy_kwargs", None)
    tagged = "policy_kwargs:\n  activation_fn: !!python/name:torch.nn.modules.activation.ReLU ''\n"
    config.write_text(yaml.safe_dump(content) + tagged)
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "1", "--num-threads", "1"]
    assert zoo_eval.main(argv) == 2
    error = capsys.readouterr().err
    assert "records a Python object (torch.nn.modules.activation.ReLU)" in error
    assert "writing that value as the text given" in error and "or rerun it" in error
    assert len(error.strip().splitlines()) == 1
