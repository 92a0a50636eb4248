import numpy as np
import pytest
import torch
from gymnasium import spaces

from delayzoo.agents.pwm.actor_critic import ActorCritic, ActorCriticConfig, cumulative_weights
from delayzoo.agents.pwm.world_model import ObservationLayout, WorldModel, WorldModelConfig

TINY_WM = WorldModelConfig(
    stoch=4, classes=4, mlp_units=16, mlp_layers=1, seq_width=16, seq_cells=1, seq_divisor=2, reward_bins=21
)
TINY_AC = ActorCriticConfig(units=16, layers=1, value_bins=21)


def make(action_space):
    torch.manual_seed(0)
    layout = ObservationLayout(spaces.Box(-1, 1, (3,), np.float32))
    action_size = action_space.n if isinstance(action_space, spaces.Discrete) else action_space.shape[0]
    world_model = WorldModel(layout, int(action_size), TINY_WM)
    agent = ActorCritic(world_model.feature_size, action_space, TINY_AC)
    starts = 5
    latent = world_model.sample_latent(world_model.latent_logits(torch.randn(starts, world_model.latent_size)))
    state = world_model.sequence.initial_state(starts)
    return world_model, agent, latent, state


def test_cumulative_weights_multiply_continuations():
    continues = torch.tensor([[0.5], [0.0], [1.0], [0.8]])
    torch.testing.assert_close(cumulative_weights(continues), torch.tensor([[1.0], [0.5], [0.0], [0.0]]))


@pytest.mark.parametrize("action_space", [spaces.Discrete(3), spaces.Box(-2, 2, (2,), np.float32)])
def test_imagination_shapes_and_bounded_actions(action_space):
    world_model, agent, latent, state = make(action_space)
    rollout = agent.imagine(world_model, latent, state, horizon=4)
    assert rollout.features.shape == (5, 5, world_model.feature_size)
    assert rollout.rewards.shape == rollout.continues.shape == (4, 5)
    assert torch.all((rollout.continues >= 0) & (rollout.continues <= 1))
    if isinstance(action_space, spaces.Box):
        for _ in range(20):
            _, encoding = agent.actor.sample(rollout.features[0] * 10)
            assert encoding.abs().max() <= 1.0


@pytest.mark.parametrize("action_space", [spaces.Discrete(3), spaces.Box(-1, 1, (2,), np.float32)])
def test_losses_reach_only_their_own_networks(action_space):
    world_model, agent, latent, state = make(action_space)
    actor_loss, critic_loss, metrics = agent.loss(world_model, latent, state, horizon=3, gamma=0.99)
    assert actor_loss.shape == critic_loss.shape == ()
    (actor_loss + critic_loss).backward()
    assert all(p.grad is None for p in world_model.parameters())
    assert all(p.grad is None for p in agent.slow_critic.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.actor.parameters())
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in agent.critic.parameters())
    assert np.isfinite(metrics["entropy"])


def test_slow_critic_moves_towards_critic_by_tau():
    _, agent, _, _ = make(spaces.Discrete(2))
    with torch.no_grad():
        for p in agent.critic.parameters():
            p.add_(1.0)
    before = [p.clone() for p in agent.slow_critic.parameters()]
    agent.update_slow_critic()
    for old, new, fast in zip(before, agent.slow_critic.parameters(), agent.critic.parameters()):
        torch.testing.assert_close(new, old + TINY_AC.slow_critic_tau * (fast - old))
