"""DelayedEZPolicy's ``mixed_precision``: on a CPU, bfloat16 autocast in the updates, the acting searches and
the reanalysis, with float32 parameters and losses; float32 everywhere when off (the default); saved."""

import numpy as np
import pytest
import torch

from delayzoo.agents.common import precision
from delayzoo.agents.common.precision import autocast_dtype
from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

FAST = dict(learning_starts=16, batch_size=4, num_simulations=3, replay_buffer_kwargs=dict(segment_length=8),
            lr_warmup_steps=10,
            prefetch=False, seed=0)


def _model(env, tiny, policy="MlpPolicy", **policy_kwargs):
    return DelayedEZ(policy, env, policy_kwargs=dict(net_kwargs=tiny, **policy_kwargs), **FAST)


def _output_dtypes(module: torch.nn.Module) -> list[torch.dtype]:
    """The dtypes ``module`` returns from now on (its value head: a layer every network call runs)."""
    seen: list[torch.dtype] = []
    module.value_head.register_forward_hook(lambda layer, inputs, output: seen.append(output.dtype))
    return seen


@pytest.mark.parametrize("mixed_precision, dtype", [(True, torch.bfloat16), ("bfloat16", torch.bfloat16),
                                                    (False, torch.float32)])
def test_updates_acting_and_reanalysis_run_under_the_autocast_and_the_rest_stays_float32(
    mixed_precision, dtype, tiny_mlp, toy
):
    model = _model(toy("vector"), tiny_mlp, mixed_precision=mixed_precision)
    model.learn(20)
    online, target = _output_dtypes(model.policy.network), _output_dtypes(model.policy.target_network)

    model.predict(model.env.reset())
    model._sample_action(model.learning_starts, None, model.n_envs)
    assert set(online) == {dtype} and not target  # acting: the online network's search

    online.clear()
    model.train(2, model.batch_size)
    assert set(online) == {dtype} and set(target) == {dtype}  # the update and its round's reanalysis
    assert all(np.isfinite(model.logger.name_to_value[f"train/{name}"]) for name in ("loss", "value_loss"))
    assert not model._grad_scaler.is_enabled()  # no float16 on a CPU

    target.clear()
    batch = model.replay_buffer.sample(4, model.target_config, model._rng, 1.0)
    (values, policies, mask), = model._reanalysis().targets([batch], model._rng)
    assert set(target) == {dtype}
    assert values.dtype == policies.dtype == torch.float32 and torch.isfinite(values).all()
    for network in (model.policy.network, model.policy.target_network):
        assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in network.parameters())


def test_convolutional_networks_train_under_bfloat16(tiny_conv, toy):
    env = PendingActionsObservation(ExecutionDelay(toy("image"), RandomWalkDelay(2, p=0.3)))
    model = _model(env, tiny_conv, "MultiInputPolicy", mixed_precision=True)
    online = _output_dtypes(model.policy.network)
    model.learn(20)
    assert model._n_updates == 4 and set(online) == {torch.bfloat16}
    assert np.isfinite(model.logger.name_to_value["train/loss"])
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.policy.parameters())


def test_float16_updates_go_through_the_gradient_scaler(monkeypatch, tiny_mlp, toy):
    # float16 on the CPU stands for a GPU here (the CI machines have none)
    monkeypatch.setattr(precision, "autocast_dtype", lambda device, value: None if value is False else torch.float16)
    model = _model(toy("vector"), tiny_mlp, mixed_precision=True)
    online = _output_dtypes(model.policy.network)
    model.learn(40)
    scaler = model._grad_scaler
    assert scaler.is_enabled() and scaler.get_scale() < 2.0**16  # the first steps overflowed: skipped, scale shrunk
    assert set(online) == {torch.float16} and np.isfinite(model.logger.name_to_value["train/loss"])
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.policy.parameters())


def test_mixed_precision_is_saved_with_the_model(tmp_path, tiny_mlp, toy):
    model = _model(toy("vector"), tiny_mlp, mixed_precision="bfloat16")
    model.save(tmp_path / "model")
    loaded = DelayedEZ.load(tmp_path / "model", env=toy("vector"))
    assert loaded.policy.mixed_precision == "bfloat16"
    assert _model(toy("vector"), tiny_mlp).policy.mixed_precision is False  # off by default


@pytest.mark.parametrize("value", ["float16", "fp16", 1, None])
def test_bad_mixed_precision_values_are_named(value, tiny_mlp, toy):
    with pytest.raises(ValueError, match=f"mixed_precision must be False, True or 'bfloat16', got {value!r}"):
        _model(toy("vector"), tiny_mlp, mixed_precision=value)


def test_true_means_float16_off_the_cpu_and_bfloat16_on_it():
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert autocast_dtype(cpu, True) is autocast_dtype(cpu, "bfloat16") is autocast_dtype(gpu, "bfloat16")
    assert autocast_dtype(gpu, True) is torch.float16 and autocast_dtype(cpu, True) is torch.bfloat16
    assert autocast_dtype(cpu, False) is autocast_dtype(gpu, False) is None
