"""DelayedEZ on Ray actors (local Ray, 2 CPUs, tiny networks): the replay gets every received step once,
the replay ratio is the in-process one, a killed actor is restarted, errors and placement stop ``learn``."""

from __future__ import annotations

import csv
import hashlib
import os
import signal
import sys

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.agents.delayed_ez.distributed import actor_env_factory
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay
from tests.agents.delayed_ez.conftest import TINY_MLP

ray = pytest.importorskip("ray")

STARTUP = 600
"""``placement_timeout`` of the tests' actors: on a loaded 2-core machine their processes took over 120 s to start."""
ACTORS = dict(
    actor_kwargs=dict(self_play_actors=2, reanalysis_actors=1, envs_per_actor=2, self_play_update_interval=10,
                      placement_timeout=STARTUP)
)
SETTINGS = dict(
    learning_starts=100, batch_size=16, num_simulations=4, replay_buffer_kwargs=dict(segment_length=20),
    reanalyze_ratio=0.5, lr_warmup_steps=0, target_update_interval=20, buffer_size=5000, seed=0,
    policy_kwargs=dict(net_kwargs=TINY_MLP),
)
RATIO = 1 / (1 * 2 * 2)  # gradient_steps / (train_freq * self_play_actors * envs_per_actor)


def make_env() -> gym.Env:
    return PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(3, p=0.2)))


@pytest.fixture(scope="module")
def local_ray():
    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"  # set by conftest.py: Ray on 127.0.0.1
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the env factories here, for the actors
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def _segment_hashes(model: DelayedEZ) -> list[str]:
    return [
        hashlib.sha1(segment.observations.tobytes() + np.asarray(segment.actions).tobytes()).hexdigest()
        for segment in model.replay_buffer.segments()
    ]


def _check_replay(model: DelayedEZ) -> None:
    """Every received step stored once: the stored segments add up to the step counter, none twice, none cut open."""
    segments = model.replay_buffer.segments()
    assert sum(len(segment) for segment in segments) == model.num_timesteps == len(model.replay_buffer)
    assert len(set(_segment_hashes(model))) == len(segments)
    for segment in segments:  # whole segments: T transitions, T + 1 observations
        assert len(segment.observations) == len(segment) + 1


@pytest.fixture(scope="module")
def trained(local_ray, tmp_path_factory):
    folder = tmp_path_factory.mktemp("actors")
    model = DelayedEZ("MultiInputPolicy", lambda: make_env(), **ACTORS, **SETTINGS)
    model.set_logger(configure(str(folder), ["csv"]))
    model.learn(1000, log_interval=10)
    model.save(folder / "model.zip")
    with open(folder / "progress.csv") as handle:
        rows = list(csv.DictReader(handle))
    return model, folder, rows


def test_a_thousand_steps_on_actors_store_every_step_once_at_the_configured_replay_ratio(trained):
    model, folder, rows = trained
    assert model.num_timesteps >= 1000 and (folder / "model.zip").is_file()
    _check_replay(model)
    ratio = float(rows[-1]["actors/replay_ratio"])
    assert abs(ratio - RATIO) <= 0.1 * RATIO
    assert model._n_updates == pytest.approx(RATIO * (model.num_timesteps - 100), rel=0.1)
    assert float(rows[-1]["actors/self_play_0_steps_per_s"]) > 0 and float(rows[-1]["actors/learner_wait_s"]) >= 0
    assert model._actors is None and model.n_envs == 1  # the actors are stopped; the model keeps its spaces' env


def test_a_model_trained_with_actors_loads_and_trains_in_process_and_back(trained, local_ray):
    _, folder, _ = trained
    plain = DelayedEZ.load(folder / "model.zip", env=make_env())
    assert plain.actor_kwargs == {} and not plain.actor_config.active  # run settings are not saved
    plain.learn(30, reset_num_timesteps=False)
    distributed = DelayedEZ.load(
        folder / "model.zip", env=make_env,
        actor_kwargs=dict(self_play_actors=1, envs_per_actor=2, placement_timeout=STARTUP),
    )
    before = distributed.num_timesteps
    distributed.learn(200, reset_num_timesteps=False)
    assert distributed.num_timesteps >= before + 200 and distributed._actors is None


class _KillActors(BaseCallback):
    """At ``at`` steps, SIGKILL the first self-play and the reanalysis actor; later, read the new pids."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.pids, self.new_pids = at, None, None

    def _on_step(self) -> bool:
        actors = self.model._actors
        if self.pids is None and self.model.num_timesteps >= self.at:
            self.pids = [ray.get(actor.ready.remote()) for actor in (actors.self_play[0], actors.reanalysis[0])]
            for pid in self.pids:
                os.kill(pid, signal.SIGKILL)
        elif self.pids is not None and self.new_pids is None and self.model.num_timesteps >= self.at + 150:
            self.new_pids = [ray.get(actor.ready.remote()) for actor in (actors.self_play[0], actors.reanalysis[0])]
        return True


def test_killed_actors_are_restarted_and_no_step_is_stored_twice(local_ray):
    model = DelayedEZ("MultiInputPolicy", make_env, **ACTORS, **SETTINGS)
    killer = _KillActors(at=250)
    model.learn(600, callback=killer)
    assert killer.pids is not None and killer.new_pids is not None
    assert all(new != old for new, old in zip(killer.new_pids, killer.pids))  # Ray restarted both
    assert model.num_timesteps >= 600
    _check_replay(model)


class _Broken(gym.Wrapper):
    def step(self, action):
        raise RuntimeError("the simulator broke")


def test_an_actor_that_keeps_failing_stops_learn_with_its_traceback(local_ray):
    model = DelayedEZ(
        "MultiInputPolicy", lambda: _Broken(make_env()),
        actor_kwargs=dict(self_play_actors=1, actor_max_restarts=1, placement_timeout=STARTUP), **SETTINGS
    )
    with pytest.raises(RuntimeError, match="SelfPlayActor 0 failed 2 times") as failure:
        model.learn(300)
    assert 'in step\n    raise RuntimeError("the simulator broke")' in str(failure.value)  # the actor's traceback
    assert model._actors is None


def test_actors_that_cannot_be_placed_stop_learn_naming_the_resources(local_ray):
    model = DelayedEZ(
        "MultiInputPolicy", make_env,
        actor_kwargs=dict(self_play_actors=1, self_play_resources={"num_cpus": 64}, placement_timeout=1),
        **SETTINGS,
    )
    with pytest.raises(RuntimeError, match=r"1 of 1 SelfPlayActors could not be placed within 1 s.*'num_cpus': 64"):
        model.learn(300)


def test_actors_that_fit_but_are_not_ready_in_time_say_so_and_not_that_resources_lack(local_ray):
    model = DelayedEZ(
        "MultiInputPolicy", make_env, actor_kwargs=dict(self_play_actors=1, placement_timeout=0.001), **SETTINGS
    )
    expected = (r"1 of 1 SelfPlayActors were not ready within 0.001 s although the Ray cluster has \{'CPU': .*\} "
                r"free, enough for one asking for .*placement_timeout")
    with pytest.raises(RuntimeError, match=expected):
        model.learn(300)
    assert model._actors is None


def test_an_env_the_actors_cannot_rebuild_is_a_value_error_saying_what_to_pass():
    with pytest.raises(ValueError, match="pass an env id string or a picklable function that returns a new env"):
        DelayedEZ("MultiInputPolicy", DummyVecEnv([make_env]), actor_kwargs=dict(self_play_actors=1), **SETTINGS)
    with pytest.raises(ValueError, match="cannot be rebuilt in another process"):  # its spec has no kwargs for it
        DelayedEZ("MlpPolicy", _Broken(gym.make("CartPole-v1")), actor_kwargs=dict(self_play_actors=1), **SETTINGS)
    model = DelayedEZ("MlpPolicy", "CartPole-v1", actor_kwargs=dict(self_play_actors=1), **SETTINGS)
    assert model.observation_space.shape == (4,)
    rebuilt = actor_env_factory(make_env())()  # the delay wrappers record their settings in the env's spec
    assert str(rebuilt) == str(make_env()) and rebuilt.spec.additional_wrappers[0].kwargs["delay"].max_delay == 3


def test_without_ray_asking_for_actors_is_an_import_error_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r'pip install "delayzoo\[ray\]"'):
        DelayedEZ("MultiInputPolicy", make_env, actor_kwargs=dict(self_play_actors=2), **SETTINGS)
    DelayedEZ("MultiInputPolicy", make_env(), **SETTINGS).learn(20)  # nothing else needs Ray
