"""DelayedEZ's actors through the zoo: ``-params self_play_actors:2 reanalysis_actors:1``, recorded in
config.yml; SIGTERM saves the model and the replay and leaves no process of the run; eval needs no Ray."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.zoo.helpers import cli_env, run_module, saved_steps
from tests.zoo.test_agents_cli import TINY
from tests.zoo.test_interrupt import checkpoints, wait_for_checkpoints

pytest.importorskip("ray")

ACTORS = ["-params", "actor_kwargs:dict(self_play_actors=2, reanalysis_actors=1, envs_per_actor=2)",
          "learning_starts:40"]
DELAY = ["--delay", "2", "--delay-process", "random-walk", "--pending-view"]


def test_sigterm_saves_model_and_replay_and_stops_every_process_then_eval_runs_without_ray(tmp_path):
    (tmp_path / "tiny.yml").write_text(TINY["delayed_ez"])
    command = [sys.executable, "-m", "delayzoo.zoo.train", "--algo", "delayed_ez", "--env", "CartPole-v1", "--seed",
               "0", "--eval-freq", "-1", "--num-threads", "1", "-f", "logs", "-conf", "tiny.yml", "-n", "100000",
               "--save-freq", "50", *DELAY, *ACTORS]
    process = subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    run = tmp_path / "logs" / "delayed_ez" / "CartPole-v1_1"
    wait_for_checkpoints(process, run, 1, timeout=240)
    family = psutil.Process(process.pid).children(recursive=True)  # Ray's processes and the actors
    assert any("SelfPlayActor" in " ".join(child.cmdline()) for child in family if child.is_running())
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=120)
    assert process.returncode == 0, output[-3000:]
    assert "Interrupted (SIGTERM)" in output
    assert saved_steps(run / "CartPole-v1.zip") >= checkpoints(run)[0] and list(run.glob("replay_buffer.*"))
    config = (run / "CartPole-v1" / "config.yml").read_text()
    assert "self_play_actors: 2" in config and "reanalysis_actors: 1" in config  # under actor_kwargs
    deadline = time.monotonic() + 30
    while any(child.is_running() and child.status() != psutil.STATUS_ZOMBIE for child in family):
        assert time.monotonic() < deadline, [child.cmdline() for child in family if child.is_running()]
        time.sleep(0.5)

    no_ray = tmp_path / "no_ray"  # a ray that cannot be imported
    no_ray.mkdir()
    (no_ray / "ray.py").write_text("raise ImportError('no Ray here')\n")
    env = {**cli_env(), "PYTHONPATH": f"{no_ray}:{cli_env()['PYTHONPATH']}"}
    evaluated = subprocess.run(
        [sys.executable, "-m", "delayzoo.zoo.eval", "--algo", "delayed_ez", "--env", "CartPole-v1", "-f", "logs",
         "-n", "2"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]


def test_address_is_checked_before_anything_is_written(tmp_path):
    result = run_module("delayzoo.zoo.train", "--algo", "delayed_ez", "--env", "CartPole-v1", "--address", "nohost",
                        "-f", "logs", cwd=tmp_path)
    assert result.returncode == 2 and "--address: the Ray address must be" in result.stderr
    assert not (tmp_path / "logs").exists()
    result = run_module("delayzoo.zoo.train", "--algo", "ppo", "--env", "CartPole-v1", "--address", "127.0.0.1:9",
                        "-n", "10", "-f", "logs", cwd=tmp_path)
    assert result.returncode == 2 and "does not use" in result.stderr
