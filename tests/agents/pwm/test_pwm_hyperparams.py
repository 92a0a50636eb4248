"""PWM's shipped CPU entries for pixels and control (MinAtar, DeepMind Control's cartpole swing-up, Pendulum)
build the model they name, and that model trains, saves and loads on its env."""

import dataclasses
import pathlib

import numpy as np
import pytest
import torch as th
import yaml

from delayzoo.agents.pwm.pwm import PWM
from delayzoo.zoo.envs import make_zoo_env

HYPERPARAMS = pathlib.Path(__file__).resolve().parents[3] / "delayzoo" / "hyperparams" / "pwm.yml"
ZOO_ONLY = {"n_timesteps", "n_envs", "policy", "env_wrapper", "env_kwargs", "normalize", "delay", "frame_stack"}
SMOKE = dict(learning_starts=64, batch_size=2, sequence_length=8, imagination_horizon=3)
"""Budgets shrunk for a short run; the entry's network and every other setting stay."""


def entry_kwargs(key: str) -> tuple[str, dict]:
    entry = yaml.safe_load(HYPERPARAMS.read_text())[key]
    kwargs = {k: v for k, v in entry.items() if k not in ZOO_ONLY}
    kwargs["policy_kwargs"] = eval(kwargs["policy_kwargs"], {"th": th, "dict": dict})
    return entry["policy"], kwargs


def make_env(key: str):
    """The env the zoo trains the entry ``key`` on (``<env id>`` or ``<env id>@<preset>``)."""
    if key.startswith("MinAtar/"):
        pytest.importorskip("minatar")
    return make_zoo_env(key.split("@")[0])


@pytest.mark.parametrize("key", ["MinAtar/Breakout-v1", "dm_control/cartpole-swingup-v0@benchmark", "Pendulum-v1"])
def test_the_cpu_entry_builds_what_it_names_and_trains_saves_and_loads(tmp_path, key):
    policy, kwargs = entry_kwargs(key)
    model = PWM(policy, make_env(key), seed=0, **{**kwargs, **SMOKE})
    for name, value in kwargs.items():
        if name not in ("policy_kwargs", "train_freq", *SMOKE):
            assert getattr(model, name) == value, name
    assert model.train_freq.frequency == kwargs["train_freq"]
    world_model = model.policy.world_model
    named = kwargs["policy_kwargs"]["world_model_kwargs"]
    config = dataclasses.asdict(world_model.config)
    for name, value in named.items():
        assert config[name] == (tuple(value) if isinstance(value, list) else value), name
    conv = named.get("frames", "vector") == "conv"
    assert (world_model.frame_encoder is not None) == conv and (world_model.layout.vector_size == 0) == conv
    assert model.policy.compile_update == kwargs["policy_kwargs"].get("compile_update", False)

    model.learn(96)
    assert model.num_timesteps == 96 and np.isfinite(model.logger.name_to_value["train/reconstruction_loss"])
    model.save(tmp_path / "model")
    loaded = PWM.load(tmp_path / "model")
    for name, tensor in model.policy.state_dict().items():
        th.testing.assert_close(loaded.policy.state_dict()[name], tensor, msg=name)
    assert loaded.policy.world_model.config == world_model.config
    obs = make_env(key).reset(seed=1)[0]
    model.policy.set_training_mode(False)
    np.testing.assert_array_equal(loaded.predict(obs, deterministic=True)[0], model.predict(obs, deterministic=True)[0])
