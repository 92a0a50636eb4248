import dataclasses

import numpy as np
import pytest
import torch
from gymnasium import spaces

from delayzoo.agents.pwm.policies import PWMPolicy
from delayzoo.agents.pwm.sequence import SequenceModel
from delayzoo.agents.pwm.world_model import ObservationLayout, WorldModel, WorldModelConfig

TINY = WorldModelConfig(
    stoch=4,
    classes=5,
    cnn_channels=(4, 8),
    mlp_units=16,
    mlp_layers=1,
    seq_width=16,
    seq_cells=2,
    seq_divisor=2,
    reward_bins=21,
)


def sequence_model(input_size, width, cells, divisor=2, dropout=0.0, **kwargs):
    return SequenceModel(input_size, width, cells, divisor=divisor, dropout=dropout, **kwargs)


def random_state(model, batch, generator):
    return {name: torch.randn(value.shape, generator=generator) for name, value in model.initial_state(batch).items()}


@pytest.mark.parametrize("method", ["parallel", "sequential"])
@pytest.mark.parametrize("tanh", [False, True])
def test_window_pass_equals_step_by_step_rollout_with_resets(method, tanh):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    model = sequence_model(7, 16, 2, tanh=tanh, readout_norm=not tanh)
    steps, batch = 11, 3
    inputs = torch.randn(steps, batch, 7, generator=generator)
    reset = torch.rand(steps, batch, generator=generator) < 0.2
    reset[0, 0] = True
    reset[4, 1] = True
    reset[10, 2] = True
    state = random_state(model, batch, generator)

    h_window, starts, final = model(inputs, reset, state, method=method)
    step_state, h_steps = state, []
    for t in range(steps):
        keep = (~reset[t]).float()
        before = {name: value * keep.view(-1, *([1] * (value.ndim - 1))) for name, value in step_state.items()}
        for name in before:  # the imagination starts: the state before every step, restarted where reset
            torch.testing.assert_close(starts[name][t], before[name], rtol=1e-4, atol=1e-5)
        h, step_state = model.step(inputs[t], reset[t], step_state)
        h_steps.append(h)
    torch.testing.assert_close(h_window, torch.stack(h_steps), rtol=1e-4, atol=1e-5)
    for name in final:
        torch.testing.assert_close(final[name], step_state[name], rtol=1e-4, atol=1e-5)


def atari_world_model(norm="batch", dropout=0.0):
    config = WorldModelConfig(
        stoch=4, classes=4, cnn_channels=(4, 8), mlp_units=16, seq_width=16, seq_divisor=2, reward_bins=21,
        norm=norm, seq_dropout=dropout,
    )
    return WorldModel(ObservationLayout(spaces.Box(0, 255, (3, 16, 16), np.uint8)), 3, config)


def observe_then_roll(model, obs, action, reset):
    """Posterior + window pass against posterior + step-by-step rollout, on the same latents."""
    steps, batch = reset.shape
    latent = model.sample_latent(model.encode(obs, 2), deterministic=True)
    h_window, _, _ = model.sequence(torch.cat([latent, action], -1), reset, model.initial_state(batch))
    state, h_steps = model.initial_state(batch), []
    for t in range(steps):
        step_latent = model.sample_latent(model.encode(obs[t], 1), deterministic=True)
        torch.testing.assert_close(step_latent, latent[t])
        h, state = model.step(step_latent, action[t], state, reset=reset[t])
        h_steps.append(h)
    return h_window, torch.stack(h_steps)


@pytest.mark.parametrize("mode", ["eval", "train with frozen statistics"])
def test_batch_norm_world_model_window_pass_equals_step_by_step(mode):
    torch.manual_seed(0)
    model = atari_world_model()
    obs = torch.randint(0, 256, (9, 3, 3, 16, 16), dtype=torch.uint8)
    with torch.no_grad():  # give the running statistics something other than their initial values
        model.train()
        model.encode(obs, 2)
    action = torch.nn.functional.one_hot(torch.randint(0, 3, (9, 3)), 3).float()
    reset = torch.zeros(9, 3, dtype=torch.bool)
    reset[0] = True
    reset[5, 1] = True
    model.eval()
    if mode != "eval":
        model.train()
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                module.eval()
    with torch.no_grad():
        h_window, h_steps = observe_then_roll(model, obs, action, reset)
    torch.testing.assert_close(h_window, h_steps, rtol=1e-4, atol=1e-5)


def test_batch_norm_needs_two_samples_per_training_batch():
    model = atari_world_model()
    obs = torch.randint(0, 256, (2, 1, 3, 16, 16), dtype=torch.uint8)
    args = (torch.zeros(2, 1, 3), torch.zeros(2, 1), torch.zeros(2, 1), torch.ones(2, 1, dtype=torch.bool))
    with pytest.raises(ValueError, match="norm='batch' needs at least 2 samples"):
        model.loss(obs, *args)
    group = atari_world_model(norm="group")
    loss, _, _ = group.loss(obs, *args)
    assert torch.isfinite(loss)


def test_unknown_norm_is_named():
    with pytest.raises(ValueError, match="'layer'.*'batch', 'group'"):
        atari_world_model(norm="layer")


def test_reference_sizes_at_atari_shapes():
    """PaMoRL's Atari model (64x64x3, 18 actions): 14,649,731 world-model parameters, 3,422,736 for the
    actor, critic and slow critic, and a recurrent state of 2 x 128 x 128 memories + 2 x 512 last inputs
    + the 512 read-out = 34,304 floats per sample."""
    policy = PWMPolicy(spaces.Box(0, 255, (3, 64, 64), np.uint8), spaces.Discrete(18), lambda _: 1e-4)
    count = lambda module: sum(p.numel() for p in module.parameters())  # noqa: E731
    assert count(policy.world_model) == 14_649_731
    assert count(policy.actor_critic) == 3_422_736
    assert count(policy.world_model.sequence) == 2_640_128  # input layer 797,696 + two cells of 921,216
    state = policy.initial_state(1)
    assert state["matrix"].shape == (1, 2, 128, 128)
    assert sum(value[0].numel() for value in state.values()) == 34_304
    assert isinstance(policy.world_model_optimizer, torch.optim.AdamW)
    assert policy.world_model_optimizer.defaults["weight_decay"] == 0.01 and policy.world_model_grad_clip == 100


def test_reset_makes_the_output_independent_of_the_past():
    torch.manual_seed(0)
    model = sequence_model(3, 8, 2)
    inputs = torch.randn(6, 2, 3)
    inputs[:3, 1] = torch.randn(3, 3)  # env 1 has a different past
    inputs[3:, 1] = inputs[3:, 0]  # and the same future
    reset = torch.zeros(6, 2, dtype=torch.bool)
    reset[3] = True
    h, _, _ = model(inputs, reset, model.initial_state(2), method="parallel")
    torch.testing.assert_close(h[3:, 0], h[3:, 1])
    assert not torch.allclose(h[:3, 0], h[:3, 1])


def test_memory_carries_information_across_steps():
    torch.manual_seed(0)
    model = sequence_model(3, 8, 1)
    inputs = torch.randn(5, 2, 3)
    inputs[1:, 1] = inputs[1:, 0]  # only step 0 differs
    h, _, _ = model(inputs, torch.zeros(5, 2, dtype=torch.bool), model.initial_state(2))
    assert not torch.allclose(h[4, 0], h[4, 1])


def test_gradients_match_between_scan_methods():
    torch.manual_seed(0)
    model = sequence_model(5, 16, 2, divisor=4).double()
    inputs = torch.randn(9, 2, 5, dtype=torch.float64)
    reset = torch.zeros(9, 2, dtype=torch.bool)
    reset[5, 0] = True
    reset[8, 1] = True
    generator = torch.Generator().manual_seed(3)
    state = {
        k: torch.randn(v.shape, generator=generator, dtype=torch.float64) for k, v in model.initial_state(2).items()
    }
    grads = []
    for method in ("parallel", "sequential"):
        model.zero_grad()
        leaf = {k: v.clone().requires_grad_() for k, v in state.items()}
        h, _, _ = model(inputs, reset, leaf, method=method)
        h.square().sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()] + [leaf[k].grad for k in ("matrix", "last_input")])
    for parallel, sequential in zip(*grads):
        torch.testing.assert_close(parallel, sequential)


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(0, 255, (3, 16, 16), np.uint8),
        spaces.Box(-1, 1, (5,), np.float32),
        spaces.Dict(
            {
                "image": spaces.Box(0, 255, (1, 12, 12), np.uint8),
                "delay": spaces.Discrete(3),
                "pending": spaces.MultiDiscrete([2, 2]),
            }
        ),
    ],
)
def test_world_model_loss_trains_and_returns_imagination_starts(space):
    torch.manual_seed(0)
    layout = ObservationLayout(space)
    model = WorldModel(layout, action_size=2, config=TINY)
    steps, batch = 6, 2
    sample = [space.sample() for _ in range(steps * batch)]
    if isinstance(space, spaces.Dict):
        obs = {
            k: torch.as_tensor(np.stack([s[k] for s in sample])).reshape(steps, batch, *np.shape(sample[0][k]))
            for k in space.spaces
        }
    else:
        obs = torch.as_tensor(np.stack(sample)).reshape(steps, batch, *space.shape)
    action = torch.randn(steps, batch, 2)
    reward = torch.randn(steps, batch)
    terminal = torch.zeros(steps, batch)
    terminal[2, 0] = 1
    is_first = torch.zeros(steps, batch, dtype=torch.bool)
    is_first[0] = True
    is_first[3, 0] = True
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(8):
        loss, metrics, starts = model.loss(obs, action, reward, terminal, is_first)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert set(metrics) >= {"reconstruction_loss", "dynamics_loss", "reward_loss", "continuation_loss"}
    assert starts["latent"].shape == (steps, batch, TINY.stoch * TINY.classes)
    assert starts["state"]["matrix"].shape[:2] == (steps, batch)
    assert torch.isfinite(torch.tensor(metrics["reconstruction_loss"]))
    assert torch.all(starts["state"]["matrix"][3, 0] == 0) and torch.all(starts["state"]["readout"][0] == 0)
    assert torch.any(starts["state"]["readout"][2, 0] != 0)


@pytest.mark.parametrize(
    "space",
    [spaces.MultiBinary(4), spaces.Dict({"x": spaces.MultiBinary(3)}), spaces.Tuple([spaces.Discrete(2)])],
)
def test_layout_rejects_unsupported_spaces_by_name(space):
    with pytest.raises(ValueError, match="Unsupported"):
        ObservationLayout(space)


def test_latent_samples_follow_the_categorical_and_pass_straight_through_gradients():
    torch.manual_seed(0)
    model = WorldModel(ObservationLayout(spaces.Box(-1, 1, (3,), np.float32)), action_size=2, config=TINY)
    logits = torch.randn(1, TINY.stoch * TINY.classes, requires_grad=True)
    log_probs = model.latent_logits(logits)
    samples = model.sample_latent(log_probs.expand(20_000, -1, -1))
    frequencies = samples.detach().reshape(20_000, TINY.stoch, TINY.classes).mean(0)
    torch.testing.assert_close(frequencies, log_probs.exp()[0].detach(), atol=0.02, rtol=0)
    one_hot = samples.detach().reshape(-1, TINY.stoch, TINY.classes).round()
    torch.testing.assert_close(samples.detach().reshape(one_hot.shape), one_hot)  # one-hot up to rounding
    assert torch.all(one_hot.sum(-1) == 1)
    samples.sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_in_place_steps_match_allocating_steps_and_refuse_autograd():
    torch.manual_seed(0)
    model = sequence_model(4, 16, 2)
    generator = torch.Generator().manual_seed(2)
    state = random_state(model, 3, generator)
    inputs = torch.randn(3, 4, generator=generator)
    reset = torch.tensor([False, True, False])
    with torch.no_grad():
        h, expected = model.step(inputs, reset, state)
        own = {name: value.clone() for name, value in state.items()}
        h_in_place, result = model.step(inputs, reset, own, in_place=True)
    assert result["matrix"] is own["matrix"]
    torch.testing.assert_close(h_in_place, h)
    for name in expected:
        torch.testing.assert_close(result[name], expected[name])
    with pytest.raises(ValueError, match="no_grad"):
        model.step(inputs, reset, own, in_place=True)


def _dynamics_loss_and_prior_gradient(free_bits):
    """The dynamics loss of one fixed batch and the norm of its gradient on the prior head."""
    torch.manual_seed(0)
    model = WorldModel(ObservationLayout(spaces.Box(-1, 1, (4,))), 2, dataclasses.replace(TINY, free_bits=free_bits))
    model.eval()
    steps, batch = 8, 3
    generator = torch.Generator().manual_seed(1)
    obs = torch.rand(steps, batch, 4, generator=generator) * 2 - 1
    action = torch.nn.functional.one_hot(torch.randint(0, 2, (steps, batch), generator=generator), 2).float()
    is_first = torch.zeros(steps, batch, dtype=torch.bool)
    is_first[0] = True
    loss, metrics, _ = model.loss(obs, action, torch.zeros(steps, batch), torch.zeros(steps, batch), is_first)
    loss.backward()
    gradient = sum(p.grad.norm() ** 2 for p in model.prior.parameters() if p.grad is not None) ** 0.5
    return metrics["dynamics_loss"], float(gradient)


def test_free_bits_clip_each_step_kl_and_stop_the_prior_gradient_below_them():
    mean_kl, gradient = _dynamics_loss_and_prior_gradient(0.0)
    assert mean_kl > 0 and gradient > 0
    # clipped step by step (DreamerV3), not the batch mean: steps below the mean are raised to it
    clipped, _ = _dynamics_loss_and_prior_gradient(mean_kl)
    assert clipped > mean_kl * 1.01
    # above every step's KL, the prior gets no gradient at all
    everything, gradient = _dynamics_loss_and_prior_gradient(1e6)
    assert everything == pytest.approx(1e6) and gradient == 0.0
