"""Nothing is lost on interruption: SIGKILL, then -i of the last checkpoint; SIGTERM, then -i of the final model.

Each run: (1) train, SIGKILL after two checkpoints; (2) ``-i`` the newest checkpoint (complete, with its
replay buffer), SIGTERM after its first checkpoint (saves like Ctrl-C); (3) ``-i`` that final model for
a few more steps. The step counter and the replay buffer continue at every hand-over.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from delayzoo.zoo.algos import load_algorithm
from tests.zoo.helpers import TINY_PPO, cli_env, run_module, saved_steps
from tests.zoo.test_agents_cli import TINY

DELAY = ["--delay", "2", "--delay-process", "random-walk", "--pending-view"]
CASES = {
    "pwm": (["-conf", "tiny.yml", *DELAY, "--save-replay-buffer"], 24),
    "delayed_ez": (["-conf", "tiny.yml", *DELAY, "--save-replay-buffer"], 16),
    "ppo": ([*TINY_PPO], 64),
}


def start(tmp_path: Path, algo: str, args: list[str], save_freq: int, *more: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "delayzoo.zoo.train", "--algo", algo, "--env", "CartPole-v1", "--seed", "0",
               "--eval-freq", "-1", "--num-threads", "1", "-f", "logs", "--save-freq", str(save_freq), *args, *more]
    return subprocess.Popen(command, cwd=tmp_path, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def checkpoints(run: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in run.glob("rl_model_*_steps.zip")
                  if (m := re.fullmatch(r"rl_model_(\d+)_steps\.zip", p.name)))


def wait_for_checkpoints(process: subprocess.Popen, run: Path, count: int, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while len(checkpoints(run)) < count:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"no {count} checkpoints in {run}:\n{process.communicate()[0][-3000:]}")
        time.sleep(0.1)


def replay_size(algo: str, model: Path, buffer: Path) -> int:
    """Transitions held in a saved replay buffer, read through the agent's own loader."""
    agent = load_algorithm(algo).load(model, device="cpu")
    agent.load_replay_buffer(buffer)
    return agent.replay_buffer.stored_steps() if algo == "pwm" else len(agent.replay_buffer)


@pytest.mark.parametrize(
    "algo", ["pwm", pytest.param("delayed_ez", marks=pytest.mark.slow), pytest.param("ppo", marks=pytest.mark.slow)]
)
def test_sigkill_then_sigterm_then_resume_continue_the_step_counter_and_the_replay_buffer(algo, tmp_path):
    args, save_freq = CASES[algo]
    if algo in TINY:
        (tmp_path / "tiny.yml").write_text(TINY[algo])
    with_buffer = algo != "ppo"
    logs = tmp_path / "logs" / algo

    first = start(tmp_path, algo, args, save_freq, "-n", "100000")
    wait_for_checkpoints(first, logs / "CartPole-v1_1", 2)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    run = logs / "CartPole-v1_1"
    assert not (run / "CartPole-v1.zip").exists()
    for steps in checkpoints(run):  # every checkpoint that exists is complete
        assert saved_steps(run / f"rl_model_{steps}_steps.zip") == steps
        assert (run / f"rl_model_replay_buffer_{steps}_steps.npz").is_file() == with_buffer  # plain arrays
    killed_at = checkpoints(run)[-1]
    checkpoint = run / f"rl_model_{killed_at}_steps.zip"

    second = start(tmp_path, algo, args, save_freq, "-n", "100000", "-i", str(checkpoint))
    wait_for_checkpoints(second, logs / "CartPole-v1_2", 1)
    second.send_signal(signal.SIGTERM)
    output, _ = second.communicate(timeout=120)
    assert second.returncode == 0, output[-3000:]
    assert "Interrupted (SIGTERM)" in output
    assert ("Loading replay buffer" in output) == with_buffer
    run2 = logs / "CartPole-v1_2"
    terminated_at = saved_steps(run2 / "CartPole-v1.zip")
    assert terminated_at >= checkpoints(run2)[0] > killed_at
    assert not list(run2.glob(".tmp-*"))

    third = run_module("delayzoo.zoo.train", "--algo", algo, "--env", "CartPole-v1", "--seed", "0", "--eval-freq", "-1",
                       "--num-threads", "1", "-f", "logs", *args, "-n", str(save_freq),
                       "-i", str(run2 / "CartPole-v1.zip"), cwd=tmp_path, timeout=300)
    assert third.returncode == 0, third.stderr[-3000:]
    run3 = logs / "CartPole-v1_3"
    assert saved_steps(run3 / "CartPole-v1.zip") == terminated_at + save_freq
    if with_buffer:
        at_kill = replay_size(algo, checkpoint, run / f"rl_model_replay_buffer_{killed_at}_steps.npz")
        at_term = replay_size(algo, run2 / "CartPole-v1.zip", run2 / "replay_buffer.npz")
        at_end = replay_size(algo, run3 / "CartPole-v1.zip", run3 / "replay_buffer.npz")
        assert at_kill > 0
        if algo == "pwm":  # one stored step per env step
            assert at_kill >= killed_at - 1 and at_term >= at_kill + (terminated_at - killed_at) - 1
            assert at_end == at_term + save_freq
        else:  # DelayedEZ stores whole segments
            assert at_kill <= at_term <= at_end and at_end > at_kill
