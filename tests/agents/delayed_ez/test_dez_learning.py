"""Learning check (slow, ~25-100 min on a shared 2-core CPU): the forward model against the paper's
Oblivious-EZ (no forward roll, the replay stores its decided actions) on delayed CartPole, four seeds.

Four seeds and their mean, because one seed is fragile: a float-rounding change alone (the value-prefix
LSTM step by ``torch.lstm_cell`` instead of ``nn.LSTM``'s kernel, outputs within ~1.5e-7) turned seed 2
from forward 169.2 / oblivious 22.3 into 84.1 / 92.4. Measured with this code (mean return of 16
episodes): seeds 1-4 forward 104.8, 84.1, 106.1, 207.2 (mean 125.6), oblivious 21.7, 92.4, 22.2, 22.3
(mean 39.7). The same check runs with one self-play and one reanalysis Ray actor (``ray-actors``)."""

import importlib.util
import pathlib
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

STEPS = 20_000
NET = dict(latent_dim=64, hidden=(128,), head_hidden=(32,), lstm_hidden_size=64, proj_hidden=64, proj_out=64,
           pred_hidden=32)


def _make_env() -> gym.Env:
    return Monitor(PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(max_delay=5))))


def _train_and_evaluate(forward_model: bool, seed: int, actors: bool = False) -> float:
    if actors:  # one self-play actor with the same 8 envs, one reanalysis actor: the same replay ratio
        env: object = _make_env
        distributed = dict(actor_kwargs=dict(self_play_actors=1, reanalysis_actors=1, envs_per_actor=8))
    else:
        env, distributed = DummyVecEnv([_make_env] * 8), {}
    model = DelayedEZ(
        "MultiInputPolicy", env, **distributed, learning_rate=1e-3, lr_warmup_steps=0, learning_starts=800,
        batch_size=64, num_simulations=16, reanalyze_ratio=0.25, gradient_steps=2, target_update_interval=100,
        auto_td_period=None, replay_buffer_kwargs=dict(segment_length=100), search_kwargs=dict(visit_temperature=0.5),
        forward_model=forward_model, seed=seed,
        policy_kwargs=dict(net_kwargs=NET, optimizer_class=torch.optim.Adam, optimizer_kwargs=dict(weight_decay=1e-4)),
    )
    model.learn(STEPS)
    env = DummyVecEnv([_make_env] * 8)
    env.seed(10_000 + seed)
    obs, returns = env.reset(), []
    while len(returns) < 16:
        actions, _ = model.predict(obs, deterministic=True)
        obs, _, _, infos = env.step(actions)
        returns += [info["episode"]["r"] for info in infos if "episode" in info]
    return float(np.mean(returns[:16]))


SEEDS = (1, 2, 3, 4)


@pytest.mark.slow
@pytest.mark.parametrize("actors", [False, True], ids=["in-process", "ray-actors"])
def test_forward_model_beats_the_oblivious_baseline_on_delayed_cartpole(actors):
    torch.set_num_threads(1)
    if actors:
        ray = pytest.importorskip("ray")
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # _make_env, for the actors
    with_model = [_train_and_evaluate(True, seed=seed, actors=actors) for seed in SEEDS]
    oblivious = [_train_and_evaluate(False, seed=seed, actors=actors) for seed in SEEDS]
    for seed, model_score, oblivious_score in zip(SEEDS, with_model, oblivious):
        print(f"seed {seed}, mean of 16 episodes: forward model {model_score:.1f}, Oblivious-EZ {oblivious_score:.1f}")
    mean_model, mean_oblivious = float(np.mean(with_model)), float(np.mean(oblivious))
    assert mean_model > 1.5 * mean_oblivious and mean_model > mean_oblivious + 15, (with_model, oblivious)
    assert sum(m > o for m, o in zip(with_model, oblivious)) >= len(SEEDS) - 1, (with_model, oblivious)


STUDY = pathlib.Path(__file__).parents[3] / "benchmarks" / "dez_delay_learning.py"


def _study():
    spec = importlib.util.spec_from_file_location("dez_delay_learning", STUDY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_forward_model_keeps_most_of_the_undelayed_return_under_a_random_walk_delay():
    """CartPole-v1, the entry's hyperparameters with the paper's pUCT search and a batch-norm net (as measured) at
    max delay 0 and at a random-walk max delay of 5 (forward model, random actions queued at reset as in the delay
    benchmark), seeds 0, 1, 2, return = mean of the last 3 evaluations (16 episodes every 2k steps): forward keeps
    at least 60% of the delay-0 mean. Oblivious-EZ's fraction is printed beside it, not asserted.

    Measured (2026-12-03, docs/delay-benchmark.md has the curves): delay 0 gives 366.5 / 231.8 / 9.9 (mean
    202.7; seed 2 locks into one action without any delay), forward 232.4 / 216.1 / 167.9 (mean 205.5, 101%),
    Oblivious-EZ 61.9 / 33.9 / 88.2 (mean 61.3, 30%). 3.5-4.5 CPU-min per run, 9 runs."""
    torch.set_num_threads(1)
    study = _study()
    batch_norm_net = (  # the entry's net as measured, before its layer norm
        "dict(net_kwargs=dict(latent_dim=64, hidden=(128,), head_hidden=(32,), lstm_hidden_size=64, proj_hidden=64, "
        "proj_out=64, pred_hidden=32), optimizer_class=th.optim.Adam, optimizer_kwargs=dict(weight_decay=1e-4))"
    )
    puct = {"search_kwargs": {}, "policy_kwargs": batch_norm_net}
    results = [study.run(max_delay, mode, seed, overrides=puct, init_action="random") for seed in (0, 1, 2)
               for max_delay, mode in ((0, "forward"), (5, "forward"), (5, "oblivious"))]
    print(study.table(results))
    undelayed = np.mean([study.final_return(r) for r in results if r["max_delay"] == 0])
    forward = np.mean([study.final_return(r) for r in results if r["max_delay"] == 5 and r["mode"] == "forward"])
    assert forward >= 0.6 * undelayed, (forward, undelayed)


def test_the_study_overrides_any_entry_value_policy_kwargs_included():
    study = _study()
    kwargs = "dict(net_kwargs=dict(latent_dim=8, hidden=(8,), head_hidden=(8,), lstm_hidden_size=8, proj_hidden=8, " \
             "proj_out=8, pred_hidden=8, value_prefix_norm='layer'))"
    model, steps = study.build(0, "forward", 0, {"policy_kwargs": kwargs, "num_simulations": 3})
    assert model.num_simulations == 3 and steps == 20_000
    assert model.policy.network.config.value_prefix_norm == "layer" and model.policy.network.lstm.hidden_size == 8

