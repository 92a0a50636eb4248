import numpy as np
import pytest
import torch
from gymnasium import spaces

from delayzoo.agents.pwm.world_model import ObservationLayout, SequenceModel, WorldModel, WorldModelConfig

TINY = WorldModelConfig(
    stoch=4,
    classes=5,
    cnn_channels=(4, 8),
    mlp_units=16,
    mlp_layers=1,
    seq_width=16,
    seq_cells=2,
    seq_heads=2,
    reward_bins=21,
)


def random_state(model, batch, generator):
    return {name: torch.randn(value.shape, generator=generator) for name, value in model.initial_state(batch).items()}


@pytest.mark.parametrize("method", ["parallel", "sequential"])
def test_window_pass_equals_step_by_step_rollout_with_resets(method):
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1)
    model = SequenceModel(input_size=7, width=16, cells=2, heads=2)
    steps, batch = 11, 3
    inputs = torch.randn(steps, batch, 7, generator=generator)
    reset = torch.rand(steps, batch, generator=generator) < 0.2
    reset[0, 0] = True
    reset[4, 1] = True
    state = random_state(model, batch, generator)

    h_window, states = model(inputs, reset, state, method=method)
    for name in state:
        torch.testing.assert_close(states[name][0], state[name])
    step_state, h_steps = state, []
    for t in range(steps):
        h, step_state = model.step(inputs[t], reset[t], step_state)
        h_steps.append(h)
        for name in step_state:
            torch.testing.assert_close(states[name][t + 1], step_state[name], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(h_window, torch.stack(h_steps), rtol=1e-4, atol=1e-5)


def test_reset_makes_the_output_independent_of_the_past():
    torch.manual_seed(0)
    model = SequenceModel(input_size=3, width=8, cells=2, heads=2)
    inputs = torch.randn(6, 2, 3)
    inputs[:3, 1] = torch.randn(3, 3)  # env 1 has a different past
    inputs[3:, 1] = inputs[3:, 0]  # and the same future
    reset = torch.zeros(6, 2, dtype=torch.bool)
    reset[3] = True
    h, _ = model(inputs, reset, model.initial_state(2), method="parallel")
    torch.testing.assert_close(h[3:, 0], h[3:, 1])
    assert not torch.allclose(h[:3, 0], h[:3, 1])


def test_memory_carries_information_across_steps():
    torch.manual_seed(0)
    model = SequenceModel(input_size=3, width=8, cells=1, heads=2)
    inputs = torch.randn(5, 2, 3)
    inputs[1:, 1] = inputs[1:, 0]  # only step 0 differs
    h, _ = model(inputs, torch.zeros(5, 2, dtype=torch.bool), model.initial_state(2))
    assert not torch.allclose(h[4, 0], h[4, 1])


def test_gradients_match_between_scan_methods():
    torch.manual_seed(0)
    model = SequenceModel(input_size=5, width=16, cells=2, heads=4).double()
    inputs = torch.randn(9, 2, 5, dtype=torch.float64)
    reset = torch.zeros(9, 2, dtype=torch.bool)
    reset[5, 0] = True
    state = {k: v.double() for k, v in model.initial_state(2).items()}
    grads = []
    for method in ("parallel", "sequential"):
        model.zero_grad()
        h, _ = model(inputs, reset, state, method=method)
        h.square().sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
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
    model = SequenceModel(input_size=4, width=16, cells=2, heads=2)
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
