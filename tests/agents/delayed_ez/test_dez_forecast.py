import numpy as np
import pytest
import torch
from gymnasium import spaces

from delayzoo.agents.delayed_ez.mcts import SearchOutput, forecast_latents
from delayzoo.agents.delayed_ez.policies import MlpPolicy, MultiInputPolicy


def _step(latent: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Hand-made dynamics whose result depends on the order of the actions."""
    return 3.0 * latent + (action.float() + 1.0).unsqueeze(1)


def test_forecast_root_applies_exactly_the_pending_actions_per_env():
    delays = torch.tensor([0, 2, 5, 1, 3])
    pending = torch.tensor([[9, 9, 9, 9, 9], [1, 0, 9, 9, 9], [2, 0, 1, 1, 2], [2, 9, 9, 9, 9], [0, 2, 1, 9, 9]])
    latent = torch.arange(10, dtype=torch.float64).view(5, 2)
    out = forecast_latents(_step, latent, pending, delays)
    for b in range(5):
        expected = latent[b : b + 1]
        for k in range(int(delays[b])):
            expected = _step(expected, pending[b, k : k + 1])
        torch.testing.assert_close(out[b : b + 1], expected)
    torch.testing.assert_close(out[0], latent[0])  # delay 0: the current latent


def test_forecast_rejects_delays_longer_than_the_queue():
    with pytest.raises(ValueError, match="delays"):
        forecast_latents(_step, torch.zeros(2, 1), torch.zeros(2, 3), torch.tensor([1, 4]))


def _dict_space(max_delay: int) -> spaces.Dict:
    return spaces.Dict(
        {
            "observation": spaces.Box(-1.0, 1.0, (4,), dtype=np.float32),
            "pending_actions": spaces.MultiDiscrete(np.full(max_delay, 3)),
            "delay": spaces.Discrete(max_delay + 1),
        }
    )


def _capture_roots(policy):
    captured = {}

    def search(network, root_latent, root_logits, rng, add_noise, **kwargs):
        captured["latent"], captured["logits"] = root_latent.clone(), root_logits.clone()
        visits = np.ones((root_latent.shape[0], 3), dtype=np.int64)
        return SearchOutput(visits, np.zeros(root_latent.shape[0]), visits.astype(np.float64), visits.argmax(1))

    policy.mcts.search = search
    return captured


@pytest.mark.parametrize("forward_model", [True, False])
def test_policy_searches_from_the_state_at_execution_time(tiny_mlp, forward_model):
    policy = MultiInputPolicy(_dict_space(4), spaces.Discrete(3), lambda _: 0.1, net_kwargs=tiny_mlp,
                              forward_model=forward_model, seed=0)
    captured = _capture_roots(policy)
    obs = {
        "observation": torch.randn(3, 4, generator=torch.Generator().manual_seed(0)),
        "pending_actions": torch.tensor([[2, 1, 0, 0], [0, 0, 0, 0], [1, 2, 2, 1]]),
        "delay": torch.tensor([2, 0, 4]),
    }
    decision = policy.act(obs, deterministic=True)
    net = policy.network.eval()
    with torch.no_grad():
        encoded = net.represent(obs["observation"])
        expected = []
        for b in range(3):
            latent = encoded[b : b + 1]
            steps = int(obs["delay"][b]) if forward_model else 0
            for k in range(steps):
                latent = net.dynamics(latent, obs["pending_actions"][b, k : k + 1], net.initial_lstm_state(1))[0]
            expected.append(latent)
        expected = torch.cat(expected)
        torch.testing.assert_close(captured["latent"], expected)
        torch.testing.assert_close(captured["logits"], net.prediction(expected)[1])
    offsets = [2, 0, 4] if forward_model else [0, 0, 0]
    np.testing.assert_array_equal(decision.root_offsets, offsets)


def test_plain_observations_search_from_the_encoded_observation(tiny_mlp):
    policy = MlpPolicy(spaces.Box(-1.0, 1.0, (4,), dtype=np.float32), spaces.Discrete(3), lambda _: 0.1,
                       net_kwargs=tiny_mlp)
    captured = _capture_roots(policy)
    obs = torch.randn(2, 4)
    decision = policy.act(obs, deterministic=True)
    with torch.no_grad():
        torch.testing.assert_close(captured["latent"], policy.network.eval().represent(obs))
    np.testing.assert_array_equal(decision.root_offsets, [0, 0])


def test_forecast_roots_carry_the_value_prefix_lstm_through_the_roll(tiny_mlp):
    from delayzoo.agents.delayed_ez.mcts import forecast_roots
    from delayzoo.agents.delayed_ez.networks import build_network

    torch.manual_seed(0)
    net = build_network((4,), 3, False, **tiny_mlp).eval()
    delays, pending = torch.tensor([0, 2, 3]), torch.tensor([[1, 1, 1], [2, 0, 1], [0, 2, 1]])
    with torch.no_grad():
        latent = net.represent(torch.randn(3, 4))
        rolled, (h, c) = forecast_roots(net, latent, pending, delays)
        torch.testing.assert_close(rolled, forecast_latents(net.transition, latent, pending, delays))
        for b in range(3):
            expected, state = latent[b : b + 1], net.initial_lstm_state(1)
            for k in range(int(delays[b])):
                expected, state, _ = net.dynamics(expected, pending[b, k : k + 1], state)
            torch.testing.assert_close(h[:, b], state[0][:, 0])
            torch.testing.assert_close(c[:, b], state[1][:, 0])
    assert not h[:, 0].any()  # delay 0: a fresh state
