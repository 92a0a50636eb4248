"""Replaying a delayed run: rl_zoo3's enjoy/record_video and ours rebuild the run's delay stack, or refuse."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from gymnasium import spaces
from rl_zoo3.utils import create_test_env, get_saved_hyperparams, get_wrapper_class

from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay, find_execution_delay
from delayzoo.zoo import cli, enjoy, record_video, train
from delayzoo.zoo.delay_settings import DelaySettings
from delayzoo.zoo.rl_zoo3_wrappers import FACTORY_ENV, NORMALIZED_RUN, REPLAY_STACK, replay_entry
from delayzoo.zoo.runs import select_run
from delayzoo.zoo.vec_envs import make_eval_env
from tests.zoo.helpers import TINY_PPO, run_module

DELAY = ["--delay", "2", "--delay-process", "random-walk", "--pending-view"]


@pytest.fixture(scope="module")
def delayed_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``logs/`` of a 256-step PPO run on CartPole-v1 under a random-walk delay, with the view."""
    folder = tmp_path_factory.mktemp("delayed_run")
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-n", "256", "--seed", "0", "--eval-freq", "-1",
            "--num-threads", "1", "-f", str(folder / "logs"), *DELAY, *TINY_PPO]
    assert train.main(argv) == 0
    return folder


def _check_stack(vec_env) -> None:
    env = vec_env.envs[0]
    stack = [env]
    while hasattr(stack[-1], "env"):
        stack.append(stack[-1].env)
    assert sum(isinstance(layer, ExecutionDelay) for layer in stack) == 1  # the delay, once
    process = find_execution_delay(env).delay_process
    assert isinstance(process, RandomWalkDelay) and (process.max_delay, process.p, process.min_delay) == (2, 0.2, 0)
    assert isinstance(env, PendingActionsObservation)
    assert isinstance(vec_env.observation_space, spaces.Dict)


def test_config_names_the_delay_for_rl_zoo3_and_its_test_env_rebuilds_it(delayed_run):
    run = select_run(delayed_run / "logs", "ppo", "CartPole-v1")
    assert run.config["env_wrapper"] == [{REPLAY_STACK: run.delay_settings().to_record()}]
    hyperparams, stats_path = get_saved_hyperparams(str(run.params_path), test_mode=True)
    env = create_test_env("CartPole-v1", stats_path=stats_path, should_render=False, hyperparams=hyperparams)
    try:  # what rl_zoo3's enjoy and record_video make
        _check_stack(env)
    finally:
        env.close()
    env = make_eval_env(run)  # what our eval, enjoy and record_video make
    try:
        _check_stack(env)
    finally:
        env.close()


def test_rl_zoo3_enjoy_and_ours_play_the_run_under_its_delay_with_the_same_scores(delayed_run, capsys):
    common = ["--algo", "ppo", "--env", "CartPole-v1", "-f", "logs", "-n", "300", "--no-render"]
    theirs = run_module("rl_zoo3.enjoy", *common, "--deterministic", cwd=delayed_run)
    assert theirs.returncode == 0, theirs.stderr[-3000:]
    mean_theirs = re.search(r"Mean reward: ([\d.]+) \+/- ([\d.]+)", theirs.stdout).groups()
    assert enjoy.main([*common[:5], str(delayed_run / "logs"), *common[6:]]) == 0
    mean_ours = re.search(r"episodes, mean score ([\d.]+) \+/- ([\d.]+)", capsys.readouterr().out).groups()
    assert mean_ours == mean_theirs


def test_rl_zoo3_record_video_and_ours_record_the_delayed_run(delayed_run, tmp_path):
    pytest.importorskip("pygame", reason="CartPole renders with pygame (gymnasium[classic-control])")
    theirs = run_module("rl_zoo3.record_video", "--algo", "ppo", "--env", "CartPole-v1", "-f", "logs", "-n", "20",
                        "-o", str(tmp_path / "theirs"), cwd=delayed_run)
    assert theirs.returncode == 0, theirs.stderr[-3000:]
    assert [path.suffix for path in (tmp_path / "theirs").iterdir()] == [".mp4"]
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-f", str(delayed_run / "logs"), "-n", "20",
            "-o", str(tmp_path / "ours")]
    assert record_video.main(argv) == 0
    videos = list((tmp_path / "ours").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000


def test_atari_and_dmc_runs_refuse_rl_zoo3_replay_before_making_an_env():
    for kind in ("atari", "dmc"):
        entry = replay_entry(kind, DelaySettings(delay=3))
        assert list(entry) == [FACTORY_ENV]
        with pytest.raises(ValueError, match="replay the run with python -m delayzoo.zoo.enjoy"):
            get_wrapper_class({"env_wrapper": [entry]})
    assert replay_entry("gym", DelaySettings()) is None  # rl_zoo3 rebuilds a plain run by itself


def test_normalised_runs_refuse_rl_zoo3_replay_since_their_statistics_are_plain_arrays():
    # rl_zoo3's tools read only a pickled vecnormalize.pkl, which the zoo no longer writes: they would play
    # unnormalised, so the run's config.yml makes them refuse instead
    for delay in (DelaySettings(), DelaySettings(delay=2)):
        entry = replay_entry("gym", delay, normalized=True)
        assert list(entry) == [NORMALIZED_RUN]
        with pytest.raises(ValueError, match="normalised.*vecnormalize.npz.*delayzoo.zoo.enjoy"):
            get_wrapper_class({"env_wrapper": [entry]})


def test_enjoy_exits_2_for_a_missing_run_or_checkpoint(delayed_run, capsys):
    base = ["enjoy", "--algo", "ppo", "--env", "CartPole-v1", "-f", str(delayed_run / "logs"), "--no-render"]
    assert cli.main([*base, "--load-checkpoint", "7"]) == 2
    assert "no model rl_model_7_steps.zip" in capsys.readouterr().err
    assert cli.main([*base, "--exp-id", "9"]) == 2
    assert "no run 9 of --algo ppo --env CartPole-v1" in capsys.readouterr().err


def test_delay_0_with_the_pending_view_trains_and_evaluates(tmp_path):
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-n", "64", "--eval-freq", "-1", "--num-threads", "1",
            "-f", str(tmp_path / "logs"), "--delay", "0", "--pending-view", *TINY_PPO]
    assert train.main(argv) == 0
    run = select_run(tmp_path / "logs", "ppo", "CartPole-v1")
    assert run.config["policy"] == "MultiInputPolicy"
    assert cli.main(["eval", "--algo", "ppo", "--env", "CartPole-v1", "-f", str(tmp_path / "logs"), "-n", "1"]) == 0
