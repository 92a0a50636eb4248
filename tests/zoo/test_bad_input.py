"""Bad input to the train command line (and a CUDA ``--device`` without CUDA to eval and enjoy): a clear message,
exit code 2, nothing written in the log folder."""

from __future__ import annotations

import gymnasium as gym
import pytest
import torch

from delayzoo import PWM
from delayzoo.wrappers import example_trace_path
from delayzoo.zoo import enjoy, train
from delayzoo.zoo import eval as evaluate
from tests.zoo.helpers import files_under

BOUNDED = ["-n", "64", "--eval-freq", "-1", "--num-threads", "1"]
"""Keeps a run short should a check let it through."""
EXAMPLE_TRACE = str(example_trace_path())


CASES = [
    (["--algo", "qrdq"], "unknown algorithm 'qrdq'; did you mean 'qrdqn'"),
    (["--env", "CartPol-v1"], "unknown env 'CartPol-v1': not in the Gymnasium registry; did you mean 'CartPole-v1'"),
    (["-params", "learning_rte:0.1"],
     "hyperparameter 'learning_rte' is not an argument of PPO; did you mean 'learning_rate'"),
    (["-params", "seed:3"], "hyperparameter 'seed' is set by the zoo; use --seed instead"),
    (["--delay", "2", "--delay-process", "random-walk", "--min-delay", "3"], "--min-delay 3 is above --delay 2"),
    (["--delay", "2", "--delay-p", "0.3"], "--delay-p 0.3 in the delay flags contradicts a constant delay"),
    (["--delay", "2", "--delay-process", "iid", "--delay-p", "0.3"],
     "--delay-p 0.3 in the delay flags applies to --delay-process random-walk, not iid"),
    (["--delay", "2", "--min-delay", "1"], "--min-delay 1 in the delay flags contradicts a constant delay"),
    (["--delay", "2", "--delay-process", "random-walk", "--delay-p", "0.7"],
     "--delay-p must be a probability in [0, 0.5], got 0.7"),
    (["--delay", "-1"], "--delay must be an integer in [0, 10000], got -1"),
    (["--delay", "100000"], "--delay must be an integer in [0, 10000], got 100000"),
    (["--obs-delay", "10001"], "--obs-delay must be an integer in [0, 10000], got 10001"),
    (["--pending-view"], "--pending-view in the delay flags needs --delay N"),
    (["--preset", "delayed", "--delay-process", "constant", "--delay-p", "0.1"],
     "--delay-p 0.1 in the delay flags and the delay entry of 'CartPole-v1@delayed' contradicts a constant delay"),
    (["--preset", "slow"],
     "no preset 'slow' for 'CartPole-v1' (key 'CartPole-v1@slow'); presets for this env: ['delayed']"),
    (["--pixels"], "--pixels applies to dm_control/ ids, not to 'CartPole-v1'"),
    (["-i", "missing.zip"], "-i 'missing.zip' must be an existing .zip file"),
    (["-params", "batch_size:1"], "AssertionError: `batch_size` must be greater than 1"),
    (["-params", "env_wrapper:[{'gymnasium.wrappers.NormalizeReward': {'gamma': 2.0}}]"],
     "InvalidBound: `gamma` should be in the interval [0, 1]. Received 2.0"),
    (["--algo", "pwm", "--delay", "2", "-params", "delay_mode:'forecast'"],
     "delay_mode='forecast' needs the pending actions and the delay in the observation"),
    (["--algo", "pwm", "--delay", "2", "--pending-view", "-params", "delay_mode:'predictive'"],
     "delay_mode must be one of 'forecast', 'augmented', 'oblivious' (or None), got 'predictive'"),
    (["--obs-delay", "-1"], "--obs-delay must be an integer in [0, 10000], got -1"),
    (["--obs-delay", "2", "--obs-delay-p", "0.3"],
     "--obs-delay-p 0.3 in the delay flags contradicts a constant delay; add --obs-delay-process random-walk"),
    (["--obs-delay", "2", "--obs-delay-process", "iid", "--obs-min-delay", "3"],
     "--obs-min-delay 3 is above --obs-delay 2"),
    (["--obs-delay-process", "iid"], "--obs-delay-process in the delay flags needs --obs-delay N"),
    (["--delay-trace", "missing.csv"], "--delay-trace missing.csv in the delay flags: cannot read it"),
    (["--obs-delay-trace", "missing.csv"], "--obs-delay-trace missing.csv in the delay flags: cannot read it"),
    (["--delay-trace", EXAMPLE_TRACE, "--delay-process", "iid"],
     f"--delay-process iid in the delay flags contradicts --delay-trace {EXAMPLE_TRACE}: the trace gives the delays"),
    (["--delay-trace", EXAMPLE_TRACE, "--delay", "2"], "--delay 2 in the delay flags contradicts --delay-trace"),
]


@pytest.mark.parametrize("argv, message", CASES, ids=[" ".join(argv) for argv, _ in CASES])
def test_bad_input_exits_2_with_a_message_and_writes_nothing(argv, message, tmp_path, capsys):
    logs = tmp_path / "logs"
    assert train.main([*argv, "-f", str(logs), *BOUNDED]) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
    assert files_under(logs) == []


@pytest.mark.parametrize(
    "argv, recorded",
    [(["--algo", "dqn", "--env", "CartPole-v1"], "--algo ppo --env CartPole-v1"),
     (["--algo", "ppo", "--env", "Pendulum-v1"], "--algo ppo --env CartPole-v1")],
    ids=["other-algo", "other-env"],
)
def test_resume_file_of_another_algo_or_env_exits_2_and_writes_nothing(argv, recorded, ppo_run, tmp_path, capsys):
    model = ppo_run / "logs/ppo/CartPole-v1_1/CartPole-v1.zip"
    logs = tmp_path / "logs"
    assert train.main([*argv, "-i", str(model), "-f", str(logs), *BOUNDED]) == 2
    error = capsys.readouterr().err
    assert f"comes from a run of {recorded}" in error and f"this run is {' '.join(argv)}" in error
    assert files_under(logs) == []


def test_resume_file_of_our_agent_without_its_run_folder_names_the_agent(tmp_path, capsys):
    model = PWM(
        "MlpPolicy", gym.make("CartPole-v1"), learning_starts=8, sequence_length=8, batch_size=2,
        policy_kwargs=dict(world_model_kwargs=dict(stoch=4, classes=4, mlp_units=16, mlp_layers=1, seq_width=16,
                                                   seq_cells=1, seq_divisor=2, reward_bins=21),
                           actor_critic_kwargs=dict(units=16, layers=1, value_bins=21)),
        device="cpu",
    )
    model.save(tmp_path / "alone.zip")
    logs = tmp_path / "logs"
    argv = ["--algo", "delayed_ez", "--env", "CartPole-v1", "-i", str(tmp_path / "alone.zip")]
    assert train.main([*argv, "-f", str(logs), *BOUNDED]) == 2
    assert "was saved by PWM; this run is --algo delayed_ez" in capsys.readouterr().err
    assert files_under(logs) == []


@pytest.fixture
def no_cuda(monkeypatch):
    """torch sees no CUDA device, whatever this machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.mark.parametrize("algo", ["ppo", "sac", "pwm", "delayed_ez"])
@pytest.mark.parametrize("command", [train, evaluate, enjoy], ids=["train", "eval", "enjoy"])
def test_device_cuda_without_cuda_exits_2_saying_how_to_choose_the_cpu(command, algo, no_cuda, tmp_path, capsys):
    env = "Pendulum-v1" if algo == "sac" else "CartPole-v1"
    argv = ["--algo", algo, "--env", env, "--device", "cuda", "-f", str(tmp_path / "logs")]
    assert command.main([*argv, *(BOUNDED if command is train else [])]) == 2
    error = capsys.readouterr().err
    assert "error: --device cuda asks for a CUDA GPU, but torch sees no CUDA device" in error
    assert error.strip().endswith("choose the CPU with --device cpu") and len(error.strip().splitlines()) == 1
    assert files_under(tmp_path / "logs") == []


@pytest.mark.parametrize("threads", ["0", "-3"])
@pytest.mark.parametrize("command", [train, evaluate, enjoy], ids=["train", "eval", "enjoy"])
def test_a_thread_count_below_1_exits_2_naming_it(command, threads, tmp_path, capsys):
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path / "logs")]
    bounded = [flag for flag in BOUNDED if flag not in ("--num-threads", "1")] if command is train else []
    assert command.main([*argv, *bounded, "--num-threads", threads]) == 2
    error = capsys.readouterr().err
    assert f"--num-threads must be >= 1 (or -1: torch's default), got {threads}" in error
    assert len(error.strip().splitlines()) == 1 and files_under(tmp_path / "logs") == []


def test_eval_takes_the_thread_count_of_train_and_enjoy(ppo_run, tmp_path):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        argv = ["--algo", "ppo", "--env", "CartPole-v1", "-f", str(ppo_run / "logs"), "-n", "1", "--checkpoints",
                "last", "-o", str(tmp_path / "scores.csv")]
        assert evaluate.main([*argv, "--num-threads", "1"]) == 0
        assert torch.get_num_threads() == 1 and (tmp_path / "scores.csv").is_file()
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("command", ["eval", "enjoy", "random_play"])
def test_a_negative_episode_seed_exits_2_naming_it(command, ppo_run, capsys):
    from delayzoo.zoo import random_play

    main = {"eval": evaluate.main, "enjoy": enjoy.main, "random_play": random_play.main}[command]
    run = [] if command == "random_play" else ["--algo", "ppo", "--env", "CartPole-v1", "--num-threads", "1"]
    assert main([*run, "-f", str(ppo_run / "logs"), "--seed", "-1"]) == 2
    error = capsys.readouterr().err
    assert "--seed must be >= 0 (Gymnasium's seeds are), got -1" in error and len(error.strip().splitlines()) == 1
