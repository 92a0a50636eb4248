"""PWM's actor-critic, trained in imagination from every posterior state of a replayed batch.

One update, top to bottom (:meth:`ActorCritic.loss`):

1. :meth:`ActorCritic.imagine`: from each start ``[z_t, h_{t-1}]`` roll the world model ``horizon``
   steps with the actor's sampled actions (no gradients into the world model);
2. the critic and the slow critic (an EMA of the critic) each run once over all imagined features;
   two lambda-returns ``R_k = r_k + gamma c_k ((1 - lambda) V_{k+1} + lambda R_{k+1})``, one bootstrapped
   by the critic's values and one by the slow critic's, by reverse :func:`lambda_returns` scans;
3. every imagined step is weighted by the *cumulative* continuation ``w_k = c_0 ... c_{k-1}``;
4. actor: REINFORCE on the critic's returns minus its values, normalised by an EMA of their
   5th-95th percentile range, plus an entropy bonus per step; critic: two-hot symlog cross-entropy
   to both returns (the reference's target).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from gymnasium import spaces
from torch import nn
from torch.distributions import Categorical, Independent, Normal

from delayzoo.agents.common.scan import lambda_returns
from delayzoo.agents.common.transforms import expectation, symexp, symlog, symlog_support, two_hot_target
from delayzoo.agents.pwm.world_model import RecurrentState, WorldModel, mlp


@dataclass
class ActorCriticConfig:
    """Sizes and coefficients of the actor-critic (paper defaults)."""

    units: int = 512
    layers: int = 2
    value_bins: int = 255
    lambd: float = 0.95
    entropy_coef: float = 3e-4
    slow_critic_tau: float = 0.01
    return_scale_decay: float = 0.99
    unimix: float = 0.01


def action_size(action_space: spaces.Space) -> int:
    """Size of the action encoding the world model reads (one-hot or the Box vector)."""
    if isinstance(action_space, spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, spaces.Box):
        return int(action_space.shape[0])
    raise ValueError(f"Unsupported action space {action_space}: PWM takes Discrete or a bounded 1-D Box")


class Actor(nn.Module):
    """Policy over world-model features.

    Discrete: a categorical with ``unimix`` uniform mixing. Box: a Normal with ``tanh`` mean and a
    standard deviation in [0.1, 1] whose samples are clipped to [-1, 1], so the action never leaves
    the (normalised) space; :class:`~delayzoo.agents.pwm.policies.PWMPolicy` rescales to the bounds.
    """

    def __init__(self, feature_size: int, action_space: spaces.Space, config: ActorCriticConfig) -> None:
        super().__init__()
        self.discrete = isinstance(action_space, spaces.Discrete)
        self.size = action_size(action_space)
        self.unimix = config.unimix
        out = self.size if self.discrete else 2 * self.size
        self.net = mlp(feature_size, config.units, config.layers, out)
        nn.init.zeros_(self.net[-1].weight)  # uniform policy at the start, as in the reference
        nn.init.zeros_(self.net[-1].bias)

    def distribution(self, features: torch.Tensor) -> torch.distributions.Distribution:
        out = self.net(features)
        if self.discrete:
            probs = (1.0 - self.unimix) * torch.softmax(out, -1) + self.unimix / self.size
            return Categorical(probs=probs, validate_args=False)  # a softmax mixture: valid by construction
        mean, std = out.chunk(2, dim=-1)
        std = 0.9 * torch.sigmoid(std + 2.0) + 0.1
        return Independent(Normal(torch.tanh(mean), std), 1)

    def sample(self, features: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """Return ``(raw, encoding)``: the sample (index / unclipped vector) and the world model's input."""
        dist = self.distribution(features)
        if self.discrete:
            raw = dist.probs.argmax(-1) if deterministic else dist.sample()
            return raw, nn.functional.one_hot(raw, self.size).float()
        raw = dist.mean if deterministic else dist.sample()
        return raw, raw.clamp(-1.0, 1.0)


class Critic(nn.Module):
    """Value as a symlog two-hot distribution over ``value_bins`` bins (zero-initialised read-out)."""

    def __init__(self, feature_size: int, config: ActorCriticConfig) -> None:
        super().__init__()
        self.net = mlp(feature_size, config.units, config.layers, config.value_bins)
        nn.init.zeros_(self.net[-1].weight)
        nn.init.zeros_(self.net[-1].bias)
        self.register_buffer("support", symlog_support(config.value_bins), persistent=False)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)

    def decode(self, logits: torch.Tensor) -> torch.Tensor:
        """Expected value of logits ``(..., bins)``."""
        return symexp(expectation(logits, self.support))

    def value(self, features: torch.Tensor) -> torch.Tensor:
        return self.decode(self.net(features))


def cumulative_weights(continues: torch.Tensor) -> torch.Tensor:
    """``w_k = c_0 c_1 ... c_{k-1}`` (``w_0 = 1``): the probability that imagined step ``k`` is reached.

    The reference weighted step ``k`` by ``c_{k-1}`` alone, which keeps counting steps after an
    imagined episode end.
    """
    ones = torch.ones_like(continues[:1])
    return torch.cumprod(torch.cat([ones, continues[:-1]], dim=0), dim=0)


@dataclass
class Imagination:
    """An imagined rollout: ``features`` (H+1, N, F); ``raw_actions``, ``rewards``, ``continues`` (H, N, ...)."""

    features: torch.Tensor
    raw_actions: torch.Tensor
    rewards: torch.Tensor
    continues: torch.Tensor


class ActorCritic(nn.Module):
    """Actor, critic and slow critic, with the return-scale EMA as a saved buffer.

    :param feature_size: size of the world model's features.
    :param action_space: ``Discrete`` or bounded ``Box``.
    :param config: sizes and coefficients.
    """

    def __init__(self, feature_size: int, action_space: spaces.Space, config: ActorCriticConfig) -> None:
        super().__init__()
        self.config = config
        self.actor = Actor(feature_size, action_space, config)
        self.critic = Critic(feature_size, config)
        self.slow_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.register_buffer("return_scale", torch.zeros(()))

    @torch.no_grad()
    def imagine(
        self, world_model: WorldModel, latent: torch.Tensor, state: RecurrentState, horizon: int
    ) -> Imagination:
        """Roll the world model ``horizon`` steps from starts ``latent`` (N, Z) and ``state`` (batch N).

        The world model runs in eval mode (BatchNorm on its running statistics, no dropout), as in the
        reference. ``state["matrix"]`` is updated in place: pass a tensor you own (the starts of
        :meth:`WorldModel.loss <delayzoo.agents.pwm.world_model.WorldModel.loss>` are, after ``backward``).
        """
        was_training = world_model.training
        world_model.eval()
        try:
            features = [world_model.features(latent, state["readout"])]
            raw_actions, outputs = [], []
            for _ in range(horizon):
                raw, encoding = self.actor.sample(features[-1])
                h, latent, state = world_model.prior_step(latent, encoding, state, in_place=True)
                raw_actions.append(raw)
                outputs.append(h)
                features.append(world_model.features(latent, h))
            h = torch.stack(outputs)  # the heads run once over the whole rollout
            rewards, continues = world_model.reward(h), world_model.continuation(h)
        finally:
            world_model.train(was_training)
        return Imagination(torch.stack(features), torch.stack(raw_actions), rewards, continues)

    def loss(
        self,
        world_model: WorldModel,
        latent: torch.Tensor,
        state: RecurrentState,
        horizon: int,
        gamma: float,
        method: str = "auto",
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Actor and critic losses from imagination: :meth:`imagine`, then :meth:`imagination_loss`.

        :param world_model: the (frozen here) world model.
        :param latent: start latents ``(N, Z)``; ``state``: start recurrent states (batch ``N``).
        :param horizon: imagination horizon (15 in the paper).
        :param gamma: discount per env step of the agent.
        :param method: :func:`lambda_returns` method.
        :return: ``(actor_loss, critic_loss, metrics)``.
        """
        return self.imagination_loss(self.imagine(world_model, latent, state, horizon), gamma, method)

    def imagination_loss(
        self, rollout: Imagination, gamma: float, method: str = "auto"
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """Actor and critic losses of an imagined rollout (updates the return-scale EMA).

        :param rollout: from :meth:`imagine`.
        :param gamma: discount per env step of the agent.
        :param method: :func:`lambda_returns` method.
        :return: ``(actor_loss, critic_loss, metrics)``.
        """
        actor_loss, critic_loss, statistics = self.loss_terms(rollout, gamma, method)
        return actor_loss, critic_loss, {name: float(value) for name, value in statistics.items()}

    def loss_terms(
        self, rollout: Imagination, gamma: float, method: str = "auto"
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`imagination_loss` with its metrics as detached scalar tensors: no host sync, so that
        ``torch.compile`` takes it as one graph (see :mod:`delayzoo.agents.pwm.compilation`)."""
        config = self.config
        features = rollout.features
        logits = self.critic(features)
        with torch.no_grad():
            values = torch.stack(
                [self.critic.decode(logits.detach()), self.slow_critic.value(features)], dim=-1
            )  # (H + 1, N, 2): critic and slow critic
            discount = (gamma * rollout.continues).unsqueeze(-1)
            returns, slow_returns = lambda_returns(
                rollout.rewards.unsqueeze(-1).expand(-1, -1, 2), values, discount, config.lambd, method
            ).unbind(-1)
            weights = cumulative_weights(rollout.continues)
            spread = torch.quantile(returns.flatten().float(), 0.95) - torch.quantile(returns.flatten().float(), 0.05)
            self.return_scale.mul_(config.return_scale_decay).add_((1.0 - config.return_scale_decay) * spread)
            scale = torch.clamp(self.return_scale, min=1.0)
            advantage = (returns - values[:-1, :, 0]) / scale
            support = self.critic.support
            target = two_hot_target(symlog(returns), support) + two_hot_target(symlog(slow_returns), support)

        dist = self.actor.distribution(features[:-1])
        log_prob = dist.log_prob(rollout.raw_actions)
        entropy = dist.entropy()
        actor_loss = -(weights * (advantage * log_prob + config.entropy_coef * entropy)).mean()
        critic_loss = -(weights * (target * torch.log_softmax(logits[:-1], -1)).sum(-1)).mean()

        statistics = {
            "actor_loss": actor_loss.detach(),
            "critic_loss": critic_loss.detach(),
            "entropy": entropy.detach().mean(),
            "imagined_return": returns.mean(),
            "imagined_reward": rollout.rewards.mean(),
            "return_scale": scale,
        }
        return actor_loss, critic_loss, statistics

    @torch.no_grad()
    def update_slow_critic(self) -> None:
        """``slow <- (1 - tau) slow + tau critic``."""
        for slow, fast in zip(self.slow_critic.parameters(), self.critic.parameters()):
            slow.lerp_(fast, self.config.slow_critic_tau)
