"""EfficientZero's training loss: the model unrolled ``K`` steps against value, value-prefix, policy and
SimSiam consistency targets, plus the image augmentations applied before it."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.nn import functional as F

from delayzoo.agents.common.transforms import h_transform, two_hot
from delayzoo.agents.delayed_ez.networks import EfficientZeroNetwork

__all__ = ["LossCoefficients", "UnrollLosses", "categorical_loss", "random_intensity", "random_shift", "unroll_losses"]


class LossCoefficients(NamedTuple):
    """Weights of the four losses (EfficientZero: value 0.25, value prefix 1, policy 1, consistency 2)."""

    value: float = 0.25
    value_prefix: float = 1.0
    policy: float = 1.0
    consistency: float = 2.0


class UnrollLosses(NamedTuple):
    """Per-sample losses ``(B,)`` summed over the unroll, and the root value logits (for priorities)."""

    value: torch.Tensor
    value_prefix: torch.Tensor
    policy: torch.Tensor
    consistency: torch.Tensor
    root_value_logits: torch.Tensor

    def weighted(self, coefficients: LossCoefficients) -> torch.Tensor:
        """``(B,)``: the weighted sum of the four losses."""
        return (
            coefficients.value * self.value
            + coefficients.value_prefix * self.value_prefix
            + coefficients.policy * self.policy
            + coefficients.consistency * self.consistency
        )


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image (``(N, C, H, W)``) by up to ``pad`` pixels, with replicated borders (DrQ / EfficientZero)."""
    n, _, height, width = images.shape
    padded = F.pad(images.float(), (pad, pad, pad, pad), mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device="cpu").to(images.device)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device="cpu").to(images.device)
    rows = torch.arange(height, device=images.device).view(1, height, 1) + dy.view(n, 1, 1)
    cols = torch.arange(width, device=images.device).view(1, 1, width) + dx.view(n, 1, 1)
    batch = torch.arange(n, device=images.device).view(n, 1, 1)
    return padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)


def random_intensity(
    images: torch.Tensor, scale: float = 0.05, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Multiply each image by ``1 + scale * clip(N(0, 1), -2, 2)`` (EfficientZero's intensity augmentation)."""
    noise = torch.randn(images.shape[0], generator=generator, device="cpu").clamp(-2.0, 2.0).to(images.device)
    return images * (1.0 + scale * noise).view(-1, *([1] * (images.dim() - 1)))


def categorical_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``logits`` against target probabilities (last dimension), in float32 (also under autocast)."""
    return -(target * F.log_softmax(logits.float(), dim=-1)).sum(-1)


def unroll_losses(
    network: EfficientZeroNetwork,
    obs: torch.Tensor,
    target_obs: torch.Tensor,
    actions: torch.Tensor,
    target_values: torch.Tensor,
    target_policies: torch.Tensor,
    target_value_prefix: torch.Tensor,
    masks: dict[str, torch.Tensor],
    lstm_horizon: int,
) -> UnrollLosses:
    """Unroll the model from ``obs`` through ``actions`` and score every step (EfficientZero).

    The gradient into each next latent is halved (EfficientZero's ``scale_gradient``), the LSTM state
    restarts every ``lstm_horizon`` steps, and the consistency target is the target branch (no
    gradient) of the projection of the encoded future observation. Under autocast (``mixed_precision``) the
    network runs in low precision and the losses are taken in float32.

    :param obs: ``(B, *obs)`` the sampled observations
    :param target_obs: ``(B, K, *obs)`` the observations after each unroll step
    :param actions: ``(B, K)``
    :param target_values: ``(B, K + 1)`` scalar values
    :param target_policies: ``(B, K + 1, A)``
    :param target_value_prefix: ``(B, K)`` scalar value prefixes
    :param masks: ``"value"`` and ``"policy"`` ``(B, K + 1)``, ``"value_prefix"`` and ``"consistency"`` ``(B, K)``
    """
    support = network.support
    unroll = actions.shape[1]
    with torch.no_grad():
        target_latents = network.represent(target_obs.flatten(0, 1))
        target_proj = network.project(target_latents, with_grad=False).view(*target_obs.shape[:2], -1)
        value_targets = two_hot(h_transform(target_values), support)
        value_prefix_targets = two_hot(h_transform(target_value_prefix), support)
    root = network.initial_inference(obs)
    latent = root.latent
    value_logits, policy_logits = [root.value_logits], [root.policy_logits]
    value_prefix_logits, online_proj = [], []
    lstm_state = network.initial_lstm_state(obs.shape[0])
    for u in range(unroll):
        latent, lstm_state, prefix_logits = network.dynamics(latent, actions[:, u], lstm_state)
        values, policies = network.prediction(latent)
        value_logits.append(values)
        policy_logits.append(policies)
        value_prefix_logits.append(prefix_logits)
        online_proj.append(network.project(latent, with_grad=True))
        if latent.requires_grad:
            latent.register_hook(lambda grad: grad * 0.5)
        if (u + 1) % lstm_horizon == 0:
            lstm_state = network.initial_lstm_state(obs.shape[0])
    online = torch.stack(online_proj, 1).float()  # float32 also under autocast, as the other losses
    cosine = (F.normalize(online, dim=-1) * F.normalize(target_proj.float(), dim=-1)).sum(-1)
    return UnrollLosses(
        value=(categorical_loss(torch.stack(value_logits, 1), value_targets) * masks["value"]).sum(1),
        value_prefix=(
            categorical_loss(torch.stack(value_prefix_logits, 1), value_prefix_targets) * masks["value_prefix"]
        ).sum(1),
        policy=(categorical_loss(torch.stack(policy_logits, 1), target_policies) * masks["policy"]).sum(1),
        consistency=-(cosine * masks["consistency"]).sum(1),
        root_value_logits=root.value_logits,
    )
