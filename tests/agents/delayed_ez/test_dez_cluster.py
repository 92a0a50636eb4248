"""A real two-node Ray cluster on the loopback range (127.0.0.2 head, 127.0.0.3 worker, each with its own
temp folder; DESIGN.md section 7): a short distributed DelayedEZ joins it through ``ray_address`` and a
two-cell sweep through ``--address``; the cluster is stopped at the end."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from tests.zoo.helpers import REPO, TINY_PPO, cli_env

ray = pytest.importorskip("ray")

RAY = str(Path(sys.executable).with_name("ray"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.2", 0))
        return probe.getsockname()[1]


@pytest.fixture
def two_node_cluster():
    folder = Path(tempfile.mkdtemp(prefix="dz", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    env = {**cli_env(), "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO)}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")  # it allows one node only; 127.0.0.2/.3 keep Ray on loopback
    port = _free_port()
    address = f"127.0.0.2:{port}"
    head = [RAY, "start", "--head", "--node-ip-address=127.0.0.2", f"--port={port}", "--num-cpus=1",
            "--include-dashboard=false", f"--temp-dir={folder / 'h'}"]
    worker = [RAY, "start", f"--address={address}", "--node-ip-address=127.0.0.3", "--num-cpus=1",
              f"--temp-dir={folder / 'w'}"]
    try:
        for command in (head, worker):
            started = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
            assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        yield address, env
    finally:
        _stop_cluster([str(folder), address])
        shutil.rmtree(folder, ignore_errors=True)


def _stop_cluster(marks: list[str]) -> None:
    """End this cluster's processes, found by its temp folder or address in their command lines (``ray stop``
    would end every Ray on the machine)."""
    ours = []
    for process in psutil.process_iter(["cmdline"]):
        if any(mark in " ".join(process.info["cmdline"] or []) for mark in marks):
            ours.append(process)
    for process in ours:
        process.terminate()
    _, alive = psutil.wait_procs(ours, timeout=20)
    for process in alive:
        process.kill()


@pytest.mark.slow
def test_delayed_ez_and_a_sweep_run_on_a_two_node_loopback_cluster(two_node_cluster, tmp_path):
    address, env = two_node_cluster
    script = f"""
import gymnasium as gym, ray
from delayzoo import DelayedEZ
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay
ray.init(address="{address}", logging_level="ERROR", log_to_driver=False)
assert sum(node["Alive"] for node in ray.nodes()) == 2
make = lambda: PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(2)))
net = dict(latent_dim=8, hidden=(16,), head_hidden=(8,), lstm_hidden_size=8, proj_hidden=8, proj_out=8, pred_hidden=4)
model = DelayedEZ("MultiInputPolicy", make, learning_starts=60, batch_size=8, num_simulations=3,
                  actor_kwargs=dict(self_play_actors=2, reanalysis_actors=1, envs_per_actor=2, ray_address="{address}"),
                  replay_buffer_kwargs=dict(segment_length=10),
                  policy_kwargs=dict(net_kwargs=net), seed=0)
model.learn(300)
assert model.num_timesteps >= 300 and len(model.replay_buffer) == model.num_timesteps and model._n_updates > 0
assert ray.is_initialized()  # the learner used this connection and left it open
ray.shutdown()
print("nodes ok")
"""
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0 and "nodes ok" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]

    sweep = subprocess.run(
        [sys.executable, "-m", "delayzoo.zoo.sweep", "--algos", "ppo", "--envs", "CartPole-v1", "--delays", "0",
         "2", "--seeds", "0", "-f", "logs", "--address", address, "--eval-n-episodes", "2", "-n", "256",
         *TINY_PPO], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
    )
    assert sweep.returncode == 0, sweep.stdout[-3000:] + sweep.stderr[-3000:]
    cells = sorted((tmp_path / "logs").glob("ppo_CartPole-v1_delay*_seed0"))
    assert [cell.name for cell in cells] == ["ppo_CartPole-v1_delay0_seed0", "ppo_CartPole-v1_delay2_seed0"]
    for cell in cells:  # trained and evaluated
        assert (cell / "ppo" / "CartPole-v1_1" / "CartPole-v1.zip").is_file()
        assert (cell / "eval_result" / "ppo" / "CartPole-v1_1.csv").is_file()
