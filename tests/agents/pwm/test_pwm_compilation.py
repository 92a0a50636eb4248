"""PWM's compiled update passes (``compile_update``): the same losses and gradients as the plain ones."""

import numpy as np
import pytest
import torch

from delayzoo.agents.pwm import PWM, compilation
from delayzoo.agents.pwm.compilation import UpdatePasses

pytestmark = pytest.mark.filterwarnings("ignore:learning_starts=.*random steps only:UserWarning")

TINY = dict(
    world_model_kwargs=dict(stoch=4, classes=4, mlp_units=16, mlp_layers=1, seq_width=16, seq_cells=2, seq_divisor=2),
    actor_critic_kwargs=dict(units=16, layers=1),
)
FAST = dict(learning_starts=64, batch_size=4, sequence_length=8, seed=0, device="cpu")


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _starts(model):
    """The imagination starts of one fixed replayed batch (after the world-model update's backward)."""
    policy = model.policy
    batch = model.replay_buffer.sample(4, 8, np.random.default_rng(0))
    time_major = lambda x: x.transpose(0, 1)  # noqa: E731
    loss, _, starts = policy.world_model.loss(
        time_major(batch.observations),
        policy.encode_action(time_major(batch.actions)),
        time_major(batch.rewards),
        time_major(batch.terminals).float(),
        time_major(batch.is_first),
    )
    loss.backward()
    return starts["latent"].flatten(0, 1), {name: value.flatten(0, 1) for name, value in starts["state"].items()}


def _update(model, passes, latent, state):
    """One pass of imagination and the actor-critic loss terms from a copy of the starts, seeded."""
    actor_critic = model.policy.actor_critic
    actor_critic.zero_grad()
    actor_critic.return_scale.fill_(2.0)
    torch.manual_seed(7)
    rollout = passes.imagine(model.policy.world_model, latent, {k: v.clone() for k, v in state.items()}, 15)
    actor_loss, critic_loss, metrics = passes.imagination_loss(rollout, 0.99)
    (actor_loss + critic_loss).backward()
    grads = {name: p.grad.clone() for name, p in actor_critic.named_parameters() if p.grad is not None}
    return rollout, metrics, grads, actor_critic.return_scale.clone()


def _assert_same_update(model):
    latent, state = _starts(model)
    plain = _update(model, UpdatePasses(model.policy.actor_critic, False), latent, state)
    compiled_passes = UpdatePasses(model.policy.actor_critic, True)
    compiled = _update(model, compiled_passes, latent, state)
    assert compiled_passes.compiled and compiled_passes.compile_seconds > 0
    for name in ("features", "raw_actions", "rewards", "continues"):
        torch.testing.assert_close(getattr(compiled[0], name), getattr(plain[0], name), rtol=1e-4, atol=1e-5, msg=name)
    assert compiled[1].keys() == plain[1].keys()
    for name in plain[1]:
        assert compiled[1][name] == pytest.approx(plain[1][name], rel=1e-4, abs=1e-6), name
    assert compiled[2].keys() == plain[2].keys() and len(plain[2]) > 0
    for name in plain[2]:
        torch.testing.assert_close(compiled[2][name], plain[2][name], rtol=1e-3, atol=1e-5, msg=name)
    torch.testing.assert_close(compiled[3], plain[3])
    # A second call runs the compiled graph without compiling again, and draws fresh samples.
    seconds = compiled_passes.compile_seconds
    again = _update(model, compiled_passes, latent, state)
    assert compiled_passes.compile_seconds == seconds
    torch.testing.assert_close(again[0].raw_actions, compiled[0].raw_actions)  # same seed, same draws


def test_traced_passes_equal_the_plain_passes(monkeypatch):
    """Dynamo's graphs of both passes (run by torch's own kernels) give the plain losses and gradients."""
    monkeypatch.setattr(compilation, "COMPILE_KWARGS", {"backend": "aot_eager", "dynamic": False})
    model = PWM("MlpPolicy", "CartPole-v1", policy_kwargs=TINY, **FAST)
    model.learn(64)
    _assert_same_update(model)


@pytest.mark.slow
def test_inductor_passes_equal_the_plain_passes():
    """The default backend (generated C++ kernels, tens of seconds to compile): losses and gradients
    equal the plain ones within float tolerance, with the same random draws."""
    model = PWM("MlpPolicy", "CartPole-v1", policy_kwargs=TINY, **FAST)
    model.learn(64)
    _assert_same_update(model)


def test_compile_update_trains_logs_and_survives_save_and_load(monkeypatch, tmp_path):
    monkeypatch.setattr(compilation, "COMPILE_KWARGS", {"backend": "aot_eager", "dynamic": False})
    model = PWM("MlpPolicy", "CartPole-v1", policy_kwargs={**TINY, "compile_update": True}, **FAST)
    model.learn(80)
    passes = model.policy.update_passes
    assert passes.compiled and passes.compile_seconds > 0
    assert model.logger.name_to_value.get("train/compile_seconds", passes.compile_seconds) > 0
    model.save(tmp_path / "model")
    loaded = PWM.load(tmp_path / "model", env=model.get_env())
    assert loaded.policy.compile_update is True and loaded.policy.update_passes.compile_update


def test_falls_back_to_plain_with_a_warning_where_compile_is_refused(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("Dynamo is not supported on this Python")

    monkeypatch.setattr(torch, "compile", refuse)
    with pytest.warns(RuntimeWarning, match="compile_update.*not available.*Dynamo is not supported"):
        model = PWM("MlpPolicy", "CartPole-v1", policy_kwargs={**TINY, "compile_update": True}, **FAST)
    model.learn(80)
    assert model.policy.update_passes.compiled is False
    assert model._n_updates > 0


def test_falls_back_to_plain_with_a_warning_where_the_first_compilation_fails(monkeypatch):
    """No C++ compiler: inductor fails on the first call, before the graph runs; the plain pass answers."""

    def failing_compile(function, **kwargs):
        def compiled(*args):
            raise RuntimeError("InvalidCxxCompiler: no working C++ compiler found")

        return compiled

    monkeypatch.setattr(torch, "compile", failing_compile)
    model = PWM("MlpPolicy", "CartPole-v1", policy_kwargs=TINY, **FAST)
    model.learn(64)
    latent, state = _starts(model)
    plain = _update(model, UpdatePasses(model.policy.actor_critic, False), latent, state)
    passes = UpdatePasses(model.policy.actor_critic, True)
    with pytest.warns(RuntimeWarning, match="InvalidCxxCompiler"):
        fallback = _update(model, passes, latent, state)
    assert not passes.compiled
    torch.testing.assert_close(fallback[0].features, plain[0].features)
    assert fallback[1] == plain[1]


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_compile_update_must_be_a_bool(value):
    with pytest.raises(ValueError, match=f"compile_update must be True or False, got {value!r}"):
        PWM("MlpPolicy", "CartPole-v1", policy_kwargs={**TINY, "compile_update": value}, **FAST)
