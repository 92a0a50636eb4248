import importlib.util
import pathlib

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml
from stable_baselines3.common.callbacks import BaseCallback

from delayzoo.agents.pwm import PWM

HYPERPARAMS = pathlib.Path(__file__).parents[3] / "delayzoo" / "hyperparams" / "pwm.yml"


def evaluate(model, episodes=5):
    env = gym.make("CartPole-v1")
    scores = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=10_000 + episode)
        state, start, done, score = None, np.array([True]), False, 0.0
        while not done:
            action, state = model.predict(obs, state=state, episode_start=start, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            score, done, start = score + reward, terminated or truncated, np.array([False])
        scores.append(score)
    return float(np.mean(scores))


class LearningCurve(BaseCallback):
    def __init__(self, every):
        super().__init__()
        self.every, self.curve = every, []

    def _on_step(self):
        if self.num_timesteps % self.every == 0:
            self.curve.append((self.num_timesteps, evaluate(self.model)))
            print(f"steps={self.curve[-1][0]} eval_mean={self.curve[-1][1]:.1f}", flush=True)
            return self.curve[-1][1] < 400
        return True


@pytest.mark.slow
def test_mlp_policy_learns_cartpole_within_30k_steps():
    torch.manual_seed(0)
    config = yaml.safe_load(HYPERPARAMS.read_text())["CartPole-v1"]
    kwargs = {key: value for key, value in config.items() if key not in ("policy", "n_timesteps", "policy_kwargs")}
    model = PWM(
        config["policy"], "CartPole-v1", policy_kwargs=eval(config["policy_kwargs"]), seed=0, device="cpu", **kwargs
    )
    curve = LearningCurve(every=2_000)
    model.learn(30_000, callback=curve)
    assert max(score for _, score in curve.curve) >= 400, curve.curve


STUDY = pathlib.Path(__file__).parents[3] / "benchmarks" / "pwm_delay_modes.py"
"""The delay-mode study; this test runs its ``run`` (seeds 0 and 1, 20k steps, the issue's target).

Not met, measured at this budget with the entry's free bits of 0.1 (2026-12-01, 26-35 CPU-min per
run): the best evaluations of forecast / augmented / oblivious were 402.0 / 402.0 / 161.0 (seed 0)
and 402.0 / 402.0 / 201.4 (seed 1), 402 being the cap (one of the 5 starts ends after 10 steps).
Augmented reaches the cap as early as forecast (9k and 10k steps, forecast 9k and 13k); forecast
holds it better (last 5 evaluations 378 and 398, augmented 340 and 342). See the README's curves."""


def _study():
    spec = importlib.util.spec_from_file_location("pwm_delay_modes", STUDY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1])
def test_forecast_mode_learns_delayed_cartpole_and_beats_augmented_and_oblivious(seed):
    study = _study()
    best = {mode: max(score for _, score in study.run(mode, seed, 20_000)["curve"]) for mode in study.MODES}
    assert best["forecast"] >= 400, best
    for baseline in ("augmented", "oblivious"):
        assert best["forecast"] >= best[baseline] + 100, best
