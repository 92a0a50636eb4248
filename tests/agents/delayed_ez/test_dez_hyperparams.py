import pathlib

import gymnasium as gym
import numpy as np
import pytest
import torch as th
import yaml
from gymnasium import spaces

from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.wrappers.minatar import make_minatar

HYPERPARAMS = pathlib.Path(__file__).resolve().parents[3] / "delayzoo" / "hyperparams" / "delayed_ez.yml"
ZOO_ONLY = {"n_timesteps", "n_envs", "frame_stack", "policy", "env_wrapper", "env_kwargs", "normalize"}


class StackedFrames(gym.Env):
    """Stand-in for the Atari factory with 4 stacked RGB frames, channel-first."""

    observation_space = spaces.Box(0, 255, (12, 96, 96), dtype=np.uint8)
    action_space = spaces.Discrete(18)

    def reset(self, *, seed=None, options=None):
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


def test_every_yaml_entry_builds_its_model():
    entries = yaml.safe_load(HYPERPARAMS.read_text())
    assert {"atari", "CartPole-v1"} <= set(entries)
    for name, entry in entries.items():
        kwargs = {k: v for k, v in entry.items() if k not in ZOO_ONLY}
        if isinstance(kwargs.get("policy_kwargs"), str):
            kwargs["policy_kwargs"] = eval(kwargs["policy_kwargs"], {"th": th, "dict": dict})
        if name == "atari":
            env = StackedFrames()
        elif name.startswith("MinAtar/"):
            pytest.importorskip("minatar")
            env = make_minatar(name)  # the zoo's env for MinAtar ids: float channels-first frames
        else:
            env = gym.make(name)
        model = DelayedEZ(entry["policy"], env, **kwargs)
        for key, value in kwargs.items():
            if key not in ("policy_kwargs", "train_freq"):
                assert getattr(model, key) == value, key
        assert model.train_freq.frequency == kwargs["train_freq"]
        if name == "atari":
            assert model.policy.network.latent_shape == (64, 6, 6) and model.num_simulations == 50
            assert model.clip_reward is True and not model.policy.network.config.state_norm
