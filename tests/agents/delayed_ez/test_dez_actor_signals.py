"""How a DelayedEZ run on Ray actors ends when its process is signalled: SIGTERM stops the actors and the Ray the
run started before the process ends as SIGTERM asks (a caller's own SIGTERM handler is left alone), and when the
learner is killed outright the actors of the Ray it started go with it. No Ray process of the run is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from delayzoo.agents.delayed_ez import distributed
from delayzoo.agents.delayed_ez.distributed import ActorConfig, ActorRun

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[3]
LEARNER = """
import os
import torch
torch.set_num_threads(1)
from stable_baselines3.common.callbacks import BaseCallback
from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from tests.agents.delayed_ez.conftest import TINY_MLP

class SayWhenActing(BaseCallback):
    def _on_step(self):
        if self.n_calls == 1:
            actors = self.model._actors
            pids = [actors.ray.get(actor.ready.remote()) for actor in actors.self_play + actors.reanalysis]
            print("acting", *pids, flush=True)
        return True

model = DelayedEZ("MlpPolicy", "CartPole-v1", actor_kwargs=dict(self_play_actors=1, reanalysis_actors=1),
                  learning_starts=50, batch_size=8, num_simulations=2, replay_buffer_kwargs=dict(segment_length=20),
                  buffer_size=5000, seed=0,
                  policy_kwargs=dict(net_kwargs=TINY_MLP))
model.learn(10**7, callback=SayWhenActing())
"""


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _learner_then_signal(number: int) -> tuple[subprocess.Popen, list[psutil.Process], list[int]]:
    """A learner on one self-play and one reanalysis actor of a local Ray it starts, sent ``number`` once acting;
    the learner, its descendants (Ray's processes) and the actors' pids."""
    learner = subprocess.Popen([sys.executable, "-c", LEARNER], cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    for line in learner.stdout:  # type: ignore[union-attr]
        if line.startswith("acting"):
            break
    else:
        raise AssertionError(f"the learner ended before acting (code {learner.wait()})")
    actors = [int(pid) for pid in line.split()[1:]]
    family = psutil.Process(learner.pid).children(recursive=True)
    names = " ".join(" ".join(child.cmdline()) for child in family if _alive(child))
    assert "ray::DashboardAgent" in names and "ray::RuntimeEnvAgent" in names, names  # the per-node agents too
    assert {child.pid for child in family} >= set(actors)
    learner.send_signal(number)
    return learner, family, actors


def _wait_until_gone(processes: list[psutil.Process], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while any(_alive(process) for process in processes):
        left = [" ".join(process.cmdline())[:80] for process in processes if _alive(process)]
        assert time.monotonic() < deadline, f"still running {seconds} s after the learner: {left}"
        time.sleep(0.2)


@pytest.mark.slow
def test_sigterm_stops_the_actors_and_the_ray_the_run_started_then_ends_the_process_as_sigterm_does():
    learner, family, _ = _learner_then_signal(signal.SIGTERM)
    assert learner.wait(timeout=60) == -signal.SIGTERM
    _wait_until_gone(family, 5)


@pytest.mark.slow
def test_the_actors_of_the_ray_the_run_started_end_when_the_learner_is_killed():
    learner, family, actors = _learner_then_signal(signal.SIGKILL)
    assert learner.wait(timeout=10) == -signal.SIGKILL
    _wait_until_gone([process for process in family if process.pid in actors], 5)
    for process in family:  # Ray's per-node agents see the node gone within about a minute: not waited for
        if _alive(process):
            process.kill()


def _handler(number: int, frame: object) -> None:
    raise KeyboardInterrupt


def test_learn_handles_sigterm_only_where_it_has_its_default_handler_in_the_main_thread(monkeypatch):
    monkeypatch.setattr(distributed, "connect", lambda address, purpose: False)
    monkeypatch.setattr(ActorRun, "_spawn", lambda self, model, env_factory: None)
    model = SimpleNamespace(num_timesteps=0, _n_updates=0)
    previous = signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        run = ActorRun(model, ActorConfig(reanalysis_actors=1), None)
        assert signal.getsignal(signal.SIGTERM) == run._stop_on_sigterm
        run.close()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        signal.signal(signal.SIGTERM, _handler)  # the caller's (the zoo's saves the model)
        ActorRun(model, ActorConfig(reanalysis_actors=1), None).close()
        assert signal.getsignal(signal.SIGTERM) is _handler
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        seen = []
        thread = threading.Thread(target=lambda: seen.append(ActorRun(model, ActorConfig(reanalysis_actors=1), None)))
        thread.start()
        thread.join()
        assert seen and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # learn in another thread
        seen[0].close()
    finally:
        signal.signal(signal.SIGTERM, previous)
