"""The train, eval and plot command lines, run as a user runs them (subprocesses, tiny budgets)."""

from __future__ import annotations

import csv
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from delayzoo.zoo import cli, plot
from delayzoo.zoo.runs import read_run_yaml
from tests.zoo.helpers import cli_env, run_module, saved_steps

RUN = Path("logs/ppo/CartPole-v1_1")


def test_run_folder_holds_model_checkpoints_config_monitor_and_evaluations(ppo_run):
    run = ppo_run / RUN
    assert saved_steps(run / "CartPole-v1.zip") == 256
    assert [saved_steps(run / f"rl_model_{steps}_steps.zip") for steps in (128, 256)] == [128, 256]
    args = read_run_yaml(run / "CartPole-v1" / "args.yml")
    config = read_run_yaml(run / "CartPole-v1" / "config.yml")
    assert (args["algo"], args["env"], args["delay"], args["pending_view"]) == ("ppo", "CartPole-v1", None, False)
    assert config["delay"]["delay"] is None and config["n_steps"] == 64 and config["policy"] == "MlpPolicy"
    lines = (run / "0.monitor.csv").read_text().splitlines()
    assert lines[1] == "r,l,t" and len(lines) > 3
    episode_lengths = [int(line.split(",")[1]) for line in lines[2:]]
    assert sum(episode_lengths) <= 256
    evaluations = np.load(run / "evaluations.npz")
    assert evaluations["timesteps"].tolist() == [128, 256] and evaluations["results"].shape == (2, 2)


def test_eval_writes_one_row_per_saved_model_and_one_column_per_episode(ppo_run, capsys):
    assert cli.main(["eval", "--algo", "ppo", "--env", "CartPole-v1", "-f", str(ppo_run / "logs"), "-n", "3"]) == 0
    with open(ppo_run / "logs/eval_result/ppo/CartPole-v1_1.csv", newline="") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["step", "episode_0", "episode_1", "episode_2"]
    assert [int(row[0]) for row in rows[1:]] == [128, 256]  # the final model has the last checkpoint's steps
    scores = np.array([[float(value) for value in row[1:]] for row in rows[1:]])
    assert scores.shape == (2, 3) and (scores >= 1).all() and (scores <= 500).all()
    assert f"mean {scores[-1].mean():10.2f}" in capsys.readouterr().out


def test_plot_writes_learning_curve_png_from_monitor_and_eval_data(ppo_run, tmp_path):
    assert cli.main(["plot", "-f", str(ppo_run / "logs"), "-o", str(tmp_path / "monitor")]) == 0
    png = tmp_path / "monitor" / "CartPole-v1.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    eval_csv = ppo_run / "logs/eval_result/ppo/CartPole-v1_1.csv"
    if not eval_csv.exists():
        eval_csv.parent.mkdir(parents=True)
        eval_csv.write_text("step,episode_0\n128,10\n256,20\n")
    assert plot.main(["-f", str(ppo_run / "logs"), "--source", "eval", "-o", str(tmp_path / "eval")]) == 0
    assert (tmp_path / "eval" / "CartPole-v1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sigint_saves_model_and_replay_buffer_and_resume_continues_the_step_counter(tmp_path):
    delay_flags = ["--delay", "3", "--delay-process", "random-walk", "--delay-p", "0.3", "--pending-view"]
    common = ["--algo", "dqn", "--env", "CartPole-v1", "--seed", "1", "--eval-freq", "-1", "--num-threads", "1",
              "-f", "logs", *delay_flags, "-params", "learning_starts:50", "train_freq:50", "gradient_steps:2"]
    process = subprocess.Popen(
        [sys.executable, "-m", "delayzoo.zoo.train", *common, "-n", "1000000", "--save-freq", "200"],
        cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a pytest started with & ignores SIGINT
    )
    run = tmp_path / "logs/dqn/CartPole-v1_1"
    deadline = time.monotonic() + 90
    while not list(run.glob("rl_model_*_steps.zip")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output[-3000:]
    interrupted_at = saved_steps(run / "CartPole-v1.zip")
    assert 200 <= interrupted_at < 1_000_000
    assert (run / "replay_buffer.npz").stat().st_size > 0 and not (run / "replay_buffer.pkl").exists()
    args = read_run_yaml(run / "CartPole-v1" / "args.yml")
    assert (args["delay"], args["delay_process"], args["delay_p"], args["min_delay"], args["pending_view"]) == (
        3, "random-walk", 0.3, 0, True
    )
    config = read_run_yaml(run / "CartPole-v1" / "config.yml")
    assert config["policy"] == "MultiInputPolicy" and config["delay"]["process"] == "random-walk"
    assert (run / "0.monitor.csv").read_text().count("\n") > 2

    # SB3's DictReplayBuffer is saved as plain arrays, which resume without --trust-run-files
    resumed = run_module("delayzoo.zoo.train", *common, "-n", "100", "--save-freq", "50",
                         "-i", str(run / "CartPole-v1.zip"), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Loading replay buffer" in resumed.stdout
    second = tmp_path / "logs/dqn/CartPole-v1_2"
    assert saved_steps(second / "CartPole-v1.zip") == interrupted_at + 100
    checkpoint_steps = sorted(int(path.name.split("_")[2]) for path in second.glob("rl_model_*_steps.zip"))
    assert checkpoint_steps == [interrupted_at + 50, interrupted_at + 100]
    assert read_run_yaml(second / "CartPole-v1" / "args.yml")["resume_timesteps"] == interrupted_at

    evaluate = ["eval", "--algo", "dqn", "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "2"]
    assert cli.main([*evaluate, "--checkpoints", "last", "--all-runs"]) == 0  # rebuilds the delayed env of each run
    csvs = sorted((tmp_path / "logs/eval_result/dqn").glob("*.csv"))
    assert [path.name for path in csvs] == ["CartPole-v1_1.csv", "CartPole-v1_2.csv"]
    steps = [[row[0] for row in csv.reader(path.open(newline=""))] for path in csvs]
    assert steps == [["step", str(interrupted_at)], ["step", str(interrupted_at + 100)]]


def test_unknown_algorithm_exits_2_with_a_suggestion_and_writes_nothing(tmp_path):
    result = run_module("delayzoo.zoo.train", "--algo", "ppo2", "--env", "CartPole-v1", "-f", "logs", cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown algorithm 'ppo2'" in result.stderr and "did you mean 'ppo'" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["evl"], []])
def test_delayzoo_console_script_rejects_unknown_or_missing_commands(command, capsys):
    assert cli.main(command) == 2
    output = capsys.readouterr()
    assert "usage: delayzoo {train,eval,plot,enjoy,record_video,sweep,study,random_play}" in output.out + output.err
    if command:
        assert "unknown command 'evl'; did you mean 'eval'?" in output.err
