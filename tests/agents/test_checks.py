"""Both agents refuse bad hyperparameters and a CUDA device torch does not see at construction (and ``load``), and
non-finite env data at the step it appears."""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from delayzoo.agents.common.checks import check_device, check_number
from delayzoo.agents.delayed_ez import DelayedEZ
from delayzoo.agents.pwm import PWM
from tests.agents.delayed_ez.conftest import TINY_MLP
from tests.agents.pwm.test_pwm_agent import FAST as PWM_FAST

DEZ_FAST = dict(
    buffer_size=400, learning_starts=8, batch_size=4, num_simulations=3, replay_buffer_kwargs=dict(segment_length=8),
        lr_warmup_steps=2,
    target_update_interval=5, policy_kwargs=dict(net_kwargs=TINY_MLP), seed=0, device="cpu",
)
AGENTS = {"pwm": (PWM, PWM_FAST), "delayed_ez": (DelayedEZ, DEZ_FAST)}

NAN = float("nan")
COMMON_BAD = [
    ("gamma", -0.5, "gamma must be in [0, 1], got -0.5"),
    ("gamma", 1.5, "gamma must be in [0, 1], got 1.5"),
    ("gamma", NAN, "gamma must be in [0, 1], got nan"),
    ("learning_rate", NAN, "learning_rate must be in (0, inf], got nan"),
    ("learning_rate", 0.0, "learning_rate must be in (0, inf], got 0.0"),
    ("learning_rate", -1e-3, "learning_rate must be in (0, inf], got -0.001"),
    ("batch_size", 0, "batch_size must be in [1, inf], got 0"),
    ("train_freq", 0, "train_freq must be in [1, inf], got 0"),
    ("gradient_steps", -2, "gradient_steps must be in [-1, inf], got -2"),
    ("buffer_size", 0, "buffer_size must be in [1, inf], got 0"),
    ("learning_starts", -1, "learning_starts must be in [0, inf], got -1"),
    ("stats_window_size", 0, "stats_window_size must be in [1, inf], got 0"),
]
SPECIFIC_BAD = [
    ("pwm", "sequence_length", 1, "sequence_length must be in [2, inf], got 1"),
    ("pwm", "imagination_horizon", 0, "imagination_horizon must be in [1, inf], got 0"),
    ("pwm", "train_freq", (0, "step"), "train_freq must be in [1, inf], got 0"),
    ("pwm", "train_freq", (2, "year"), "train_freq must be an integer or (n, 'step') / (n, 'episode')"),
    ("delayed_ez", "num_simulations", 0, "num_simulations must be in [1, inf], got 0"),
    ("delayed_ez", "td_steps", 0, "td_steps must be in [1, inf], got 0"),
    ("delayed_ez", "reanalyze_ratio", 1.2, "reanalyze_ratio must be in [0, 1], got 1.2"),
    ("delayed_ez", "search_kwargs.exploration_fraction", NAN, "exploration_fraction must be in [0, 1], got nan"),
    ("delayed_ez", "replay_buffer_kwargs.priority_beta", -0.1, "priority_beta must be in [0, 1], got -0.1"),
    ("delayed_ez", "search_kwargs.dirichlet_alpha", 0.0, "dirichlet_alpha must be in (0, inf], got 0.0"),
    ("delayed_ez", "max_grad_norm", float("inf"), "max_grad_norm must be in (0, inf], got inf"),
    ("delayed_ez", "value_loss_coef", -1.0, "value_loss_coef must be in [0, inf], got -1.0"),
    ("delayed_ez", "search_kwargs.visit_temperature", 0.0, "visit_temperature must be in (0, inf], got 0.0"),
    ("delayed_ez", "auto_td_period", 0, "auto_td_period must be in [1, inf], got 0"),
    ("delayed_ez", "replay_buffer_kwargs.segment_length", 0, "segment_length must be in [1, inf], got 0"),
    ("delayed_ez", "actor_kwargs.envs_per_actor", 0, "envs_per_actor must be in [1, inf], got 0"),
    ("delayed_ez", "actor_kwargs.placement_timeout", -1.0, "placement_timeout must be in (0, inf], got -1.0"),
]
CASES = [(algo, *case) for algo in AGENTS for case in COMMON_BAD] + SPECIFIC_BAD


@pytest.mark.parametrize("algo, name, value, message", CASES, ids=[f"{c[0]}-{c[1]}={c[2]}" for c in CASES])
def test_constructor_refuses_a_value_out_of_range_naming_it_and_the_range(algo, name, value, message):
    agent, fast = AGENTS[algo]
    group, _, key = name.rpartition(".")  # a key of a keyword group (search_kwargs.pb_c_init), or a keyword
    settings = {**fast, group: {**fast.get(group, {}), key: value}} if group else {**fast, name: value}
    with pytest.raises(ValueError) as error:
        agent("MlpPolicy", "CartPole-v1", **settings)
    assert message in str(error.value)


@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_constructor_refuses_values_of_the_wrong_type(algo):
    agent, fast = AGENTS[algo]
    with pytest.raises(TypeError, match="batch_size must be an integer, got 2.5"):
        agent("MlpPolicy", "CartPole-v1", **{**fast, "batch_size": 2.5})
    with pytest.raises(TypeError, match="gamma must be a number, got '0.9'"):
        agent("MlpPolicy", "CartPole-v1", **{**fast, "gamma": "0.9"})


def test_check_number_bounds():
    check_number("x", 0, 0, 1)
    check_number("x", 1, 0, 1)
    check_number("x", None, 0, optional=True)
    for value in (-0.0001, 1.0001, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"x must be in \[0, 1\]"):
            check_number("x", value, 0, 1)
    with pytest.raises(TypeError, match="x must be a number, got True"):
        check_number("x", True, 0, 1)


def _cuda_devices(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """torch sees ``count`` CUDA devices, whatever this machine has."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


@pytest.mark.parametrize(
    "count, device, message",
    [
        (0, "cuda", "device='cuda' asks for a CUDA GPU, but torch sees no CUDA device"),
        (0, torch.device("cuda", 0), "device='cuda:0' asks for a CUDA GPU, but torch sees no CUDA device"),
        (0, "cuda", "; choose the CPU with device='cpu'"),
        (1, "cuda:1", "device='cuda:1' asks for a CUDA GPU, but torch sees 1 CUDA device(s), cuda:0 to cuda:0; "
                      "choose the CPU with device='cpu'"),
        (2, "gpu", "device='gpu' is not a torch device: use 'auto', 'cpu', 'cuda' or 'cuda:N'"),
    ],
)
def test_check_device_refuses_a_cuda_device_torch_does_not_see(monkeypatch, count, device, message):
    _cuda_devices(monkeypatch, count)
    with pytest.raises(ValueError) as error:
        check_device(device)
    assert message in str(error.value)
    for fine in ["auto", "cpu", torch.device("cpu"), *(["cuda", f"cuda:{count - 1}"] if count else [])]:
        check_device(fine)


@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_agents_and_load_refuse_a_cuda_device_torch_does_not_see_and_auto_stays_silent(algo, monkeypatch, tmp_path):
    agent, fast = AGENTS[algo]
    agent("MlpPolicy", "CartPole-v1", **fast).save(tmp_path / "model")
    _cuda_devices(monkeypatch, 1)
    for device in ["cuda:1", "cuda:7"]:
        with pytest.raises(ValueError, match=f"device='{device}' asks for a CUDA GPU, but torch sees 1 CUDA device"):
            agent("MlpPolicy", "CartPole-v1", **{**fast, "device": device})
    _cuda_devices(monkeypatch, 0)
    message = "device='cuda' asks for a CUDA GPU, but torch sees no CUDA device"
    with pytest.raises(ValueError, match=message):
        agent("MlpPolicy", "CartPole-v1", **{**fast, "device": "cuda"})
    with pytest.raises(ValueError, match=message):
        agent.load(tmp_path / "model", device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert agent.load(tmp_path / "model", device="auto").device.type == "cpu"
        assert agent("MlpPolicy", "CartPole-v1", **{**fast, "device": "auto"}).device.type == "cpu"


@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_gradient_steps_minus_one_makes_one_update_per_collected_step(algo):
    agent, fast = AGENTS[algo]
    train_freq = 4
    model = agent("MlpPolicy", "CartPole-v1", **{**fast, "gradient_steps": -1, "train_freq": train_freq})
    model.learn(fast["learning_starts"] + 2 * train_freq)
    assert model._n_updates >= train_freq  # SB3's meaning: as many updates as env steps collected


@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_learning_starts_beyond_the_run_warns(algo):
    agent, fast = AGENTS[algo]
    model = agent("MlpPolicy", "CartPole-v1", **fast)
    with pytest.warns(UserWarning, match=f"learning_starts={fast['learning_starts']} >= total_timesteps=4"):
        model.learn(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        agent("MlpPolicy", "CartPole-v1", **fast).learn(fast["learning_starts"] + 4)


class BadAt(gym.Wrapper):
    """Returns a NaN reward or observation entry at step ``at``."""

    def __init__(self, env: gym.Env, at: int, what: str) -> None:
        super().__init__(env)
        self.at, self.what, self.t = at, what, 0

    def step(self, action):
        obs, reward, _, _, info = self.env.step(action)
        self.t += 1
        if self.t == self.at:
            if self.what == "reward":
                reward = float("nan")
            else:
                obs = np.array(obs, dtype=np.float32)
                obs[1] = np.inf
        return obs, reward, False, False, info


@pytest.mark.parametrize("what", ["reward", "observation"])
@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_non_finite_reward_or_observation_raises_naming_step_and_env_before_any_update(algo, what):
    from stable_baselines3.common.env_util import make_vec_env

    agent, fast = AGENTS[algo]
    at = 12  # the env step of the second env; updates have started at 16 steps over both envs
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    env.envs[1] = BadAt(env.envs[1], at, what)
    model = agent("MlpPolicy", env, **{**fast, "learning_starts": 16, "train_freq": 1})
    with pytest.raises(ValueError, match=f"non-finite {what}.* at step {2 * at} in env 1"):
        model.learn(200)
    assert model.num_timesteps == 2 * at and model._n_updates > 0
    params = [p for p in model.policy.parameters()]
    assert all(bool(np.isfinite(p.detach().numpy()).all()) for p in params)
