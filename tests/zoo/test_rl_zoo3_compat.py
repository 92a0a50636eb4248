"""The zoo as rl_zoo3 users expect: --gym-packages, --vec-env subproc, -uuid runs, monitor_kwargs,
normalisation with the pending view, -optimize."""

from __future__ import annotations

import configparser
import csv
import re
import sys
from pathlib import Path

import gymnasium as gym
import pytest
from stable_baselines3.common.vec_env import VecNormalize

from delayzoo.zoo import cli, plot, train
from delayzoo.zoo.runs import find_runs, select_run
from delayzoo.zoo.vec_envs import make_eval_env
from tests.zoo.helpers import REPO, saved_steps

ENV = "DelayzooSuccess-v0"


@pytest.fixture(scope="module")
def package_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two -uuid runs of a2c on an env of --gym-packages, in subprocess envs, with monitor_kwargs."""
    folder = tmp_path_factory.mktemp("package_run")
    sys.modules.pop("tests.zoo.gym_package", None)
    gym.registry.pop(ENV, None)
    argv = ["--algo", "a2c", "--env", ENV, "--gym-packages", "tests.zoo.gym_package", "--vec-env", "subproc",
            "-uuid", "--delay", "1", "-n", "40", "--eval-freq", "-1", "--num-threads", "1", "-f", str(folder / "logs"),
            "-params", "n_envs:2", "n_steps:5", "monitor_kwargs:dict(info_keywords=('is_success',))"]
    for seed in ("0", "1"):
        assert train.main([*argv, "--seed", seed]) == 0
    return folder


def test_gym_packages_are_imported_before_the_env_id_is_checked(package_run):
    runs = find_runs(package_run / "logs", ["a2c"], [ENV])
    assert len(runs) == 2 and all(saved_steps(run.final_model) == 40 for run in runs)
    assert runs[0].args["gym_packages"] == ["tests.zoo.gym_package"]


def test_subproc_envs_are_made_from_the_parent_spec_and_monitor_kwargs_reach_the_monitor(package_run):
    for run in find_runs(package_run / "logs", ["a2c"], [ENV]):
        assert run.args["vec_env"] == "subproc" and run.config["monitor_kwargs"]
        for rank in (0, 1):
            lines = (run.path / f"{rank}.monitor.csv").read_text().splitlines()
            assert lines[1] == "r,l,t,is_success" and len(lines) > 2


def test_uuid_runs_are_found_by_eval_and_plot(package_run, tmp_path):
    runs = find_runs(package_run / "logs", ["a2c"], [ENV])
    assert [run.run_id for run in runs] == [1, 1] and all(len(run.name) == len(f"{ENV}_1_") + 36 for run in runs)
    assert select_run(package_run / "logs", "a2c", ENV).path == runs[-1].path  # the latest of the shared id
    evaluate = ["eval", "--algo", "a2c", "--env", ENV, "--gym-packages", "tests.zoo.gym_package",
                "-f", str(package_run / "logs"), "-n", "2", "--all-runs"]
    assert cli.main(evaluate) == 0
    for run in runs:
        rows = list(csv.reader(run.eval_csv.open(newline="")))
        assert rows[0] == ["step", "episode_0", "episode_1"] and rows[-1][0] == "40"
    assert plot.main(["-f", str(package_run / "logs"), "-o", str(tmp_path)]) == 0
    assert (tmp_path / f"{ENV}.png").read_bytes()[:4] == b"\x89PNG"


def test_unimportable_gym_package_exits_2_naming_it(tmp_path, capsys):
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "--gym-packages", "no_such_gym_package", "-f", str(tmp_path)]
    assert train.main(argv) == 2
    assert "--gym-packages no_such_gym_package: cannot import it" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.filterwarnings("ignore:You have specified a mini-batch size")
@pytest.mark.parametrize(
    "env_id, extra", [("Acrobot-v1", []), ("dm_control/cartpole-swingup-v0", ["n_steps:16", "batch_size:16"])]
)
def test_pending_view_with_a_normalised_entry_normalises_only_the_observation(env_id, extra, tmp_path):
    # Acrobot-v1: rl_zoo3's PPO entry (normalize: true); dm_control: ours (normalize: true)
    argv = ["--algo", "ppo", "--env", env_id, "--delay", "2", "--pending-view", "-n", "32", "--eval-freq", "-1",
            "--num-threads", "1", "-f", str(tmp_path / "logs"), "-params", "n_envs:1", "n_steps:32",
            "batch_size:32", "n_epochs:1", *extra]
    assert train.main(argv) == 0
    run = select_run(tmp_path / "logs", "ppo", env_id)
    assert run.config["normalize"] and (run.params_path / "vecnormalize.npz").is_file()
    env = make_eval_env(run)
    try:
        normalize = env.venv if not isinstance(env, VecNormalize) else env
        assert isinstance(normalize, VecNormalize) and normalize.norm_obs_keys == ["observation"]
        obs = env.reset()
        for _ in range(3):
            assert obs["delay"].dtype.kind == "i" and obs["pending_actions"].dtype.kind in "iuf"
            assert env.observation_space["pending_actions"].contains(obs["pending_actions"][0])
            obs, *_ = env.step([env.action_space.sample()])
    finally:
        env.close()


def test_the_zoo_extra_brings_what_optimize_and_plot_need_and_setup_installs_it():
    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    zoo = config["options.extras_require"]["zoo"].split()
    assert {requirement.split(">")[0] for requirement in zoo} >= {"pandas", "optuna"}
    installed = re.search(r'-e "\.\[([\w,]+)\]"', (REPO / "scripts/setup.sh").read_text())
    assert installed and {"test", "zoo", "ray"} <= set(installed[1].split(","))


def test_optimize_runs_its_trials_and_writes_the_report(tmp_path):
    argv = ["--algo", "dqn", "--env", "CartPole-v1", "-n", "200", "-optimize", "--n-trials", "2", "--n-jobs", "1",
            "--sampler", "random", "--pruner", "none", "--eval-episodes", "1", "--n-evaluations", "1",
            "--num-threads", "1", "-f", str(tmp_path / "logs"), "--delay", "1"]
    assert train.main(argv) == 0
    reports = sorted(path.suffix for path in (tmp_path / "logs/dqn").glob("report_CartPole-v1_2-trials-*"))
    assert reports == [".csv", ".pkl"]  # written with pandas, after the trials
