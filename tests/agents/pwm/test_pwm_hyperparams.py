"""PWM's shipped MinAtar entry builds the model it names, and that model trains, saves and loads on MinAtar."""

import dataclasses
import pathlib

import numpy as np
import pytest
import torch as th
import yaml

from delayzoo.agents.pwm.pwm import PWM

HYPERPARAMS = pathlib.Path(__file__).resolve().parents[3] / "delayzoo" / "hyperparams" / "pwm.yml"
ZOO_ONLY = {"n_timesteps", "n_envs", "policy", "env_wrapper", "env_kwargs", "normalize", "delay", "frame_stack"}
SMOKE = dict(learning_starts=64, batch_size=2, sequence_length=8, imagination_horizon=3)
"""Budgets shrunk for a short run; the entry's network and every other setting stay."""


def minatar_entry() -> tuple[str, dict]:
    entry = yaml.safe_load(HYPERPARAMS.read_text())["MinAtar/Breakout-v1"]
    kwargs = {k: v for k, v in entry.items() if k not in ZOO_ONLY}
    kwargs["policy_kwargs"] = eval(kwargs["policy_kwargs"], {"th": th, "dict": dict})
    return entry["policy"], kwargs


def test_minatar_entry_builds_what_it_names_and_trains_saves_and_loads(tmp_path):
    pytest.importorskip("minatar")
    from delayzoo.wrappers.minatar import make_minatar

    policy, kwargs = minatar_entry()
    model = PWM(policy, make_minatar("MinAtar/Breakout-v1"), seed=0, **{**kwargs, **SMOKE})
    for key, value in kwargs.items():
        if key not in ("policy_kwargs", "train_freq", *SMOKE):
            assert getattr(model, key) == value, key
    assert model.train_freq.frequency == kwargs["train_freq"]
    world_model = model.policy.world_model
    named = kwargs["policy_kwargs"]["world_model_kwargs"]
    for key, value in named.items():
        assert dataclasses.asdict(world_model.config)[key] == (tuple(value) if isinstance(value, list) else value), key
    conv = named.get("frames", "vector") == "conv"
    assert (world_model.frame_encoder is not None) == conv and (world_model.layout.vector_size == 0) == conv

    model.learn(96)
    assert model.num_timesteps == 96 and np.isfinite(model.logger.name_to_value["train/reconstruction_loss"])
    model.save(tmp_path / "model")
    loaded = PWM.load(tmp_path / "model")
    for name, tensor in model.policy.state_dict().items():
        th.testing.assert_close(loaded.policy.state_dict()[name], tensor, msg=name)
    assert loaded.policy.world_model.config == world_model.config
    obs = make_minatar("MinAtar/Breakout-v1").reset(seed=1)[0]
    model.policy.set_training_mode(False)
    assert loaded.predict(obs, deterministic=True)[0] == model.predict(obs, deterministic=True)[0]
