"""DelayedEZ's update on one batch: EfficientZero's unrolled loss, backward, gradient clip and optimiser step.

:class:`~delayzoo.agents.delayed_ez.delayed_ez.DelayedEZ` samples a round's batches, gets their targets
(:mod:`~delayzoo.agents.delayed_ez.reanalysis`) and calls :func:`update_on_batch` for each, top to bottom:
stack the frames, augment images, unroll the model ``K`` steps against the targets
(:func:`~delayzoo.agents.delayed_ez.losses.unroll_losses`), weight by importance sampling, step.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import torch

from delayzoo.agents.delayed_ez.losses import LossCoefficients, random_intensity, random_shift, unroll_losses
from delayzoo.agents.delayed_ez.networks import EfficientZeroNetwork
from delayzoo.agents.delayed_ez.policies import DelayedEZPolicy
from delayzoo.agents.delayed_ez.reanalysis import Targets, batch_stacks
from delayzoo.agents.delayed_ez.replay import ReplayBatch

__all__ = [
    "AUGMENT_SHIFT",
    "LOGGED_LOSSES",
    "UpdateConfig",
    "learning_rate",
    "update_on_batch",
    "warn_if_augment_distorts",
]

AUGMENT_SHIFT = 4
"""Pixels of ``augment``'s random shift: EfficientZero's, for its 96 x 96 frames."""

LOGGED_LOSSES = ("loss", "value_loss", "value_prefix_loss", "policy_loss", "consistency_loss")
"""What :func:`update_on_batch` returns, in order (logged as ``train/<name>``)."""


@dataclasses.dataclass(frozen=True)
class UpdateConfig:
    """How one batch updates the network (see DelayedEZ's keywords of the same names).

    :param frame_stack: frames per observation
    :param num_unroll_steps: model unroll steps (K)
    :param lstm_horizon: value-prefix LSTM reset period
    :param coefficients: the four losses' weights
    :param max_grad_norm: gradient clipping
    :param augment: random shifts and intensity changes of image observations
    """

    frame_stack: int = 1
    num_unroll_steps: int = 5
    lstm_horizon: int = 5
    coefficients: LossCoefficients = LossCoefficients()
    max_grad_norm: float = 5.0
    augment: bool = True


def learning_rate(
    peak: float, n_updates: int, warmup_steps: int, decay_steps: int | None, decay_rate: float
) -> float:
    """EfficientZero's schedule: linear warm-up to ``peak`` over ``warmup_steps`` updates, then x``decay_rate``
    every ``decay_steps`` updates."""
    if warmup_steps > 0 and n_updates < warmup_steps:
        return peak * (n_updates + 1) / warmup_steps
    if decay_steps:
        return peak * decay_rate ** ((n_updates - max(warmup_steps, 0)) // decay_steps)
    return peak


def warn_if_augment_distorts(network: EfficientZeroNetwork, augment: bool) -> None:
    """Warn when ``augment``'s shift is a large part of the frame (it is sized for 96 x 96 Atari frames)."""
    if not (augment and network.image):
        return
    side = min(network.observation_shape[1:])
    if side < 10 * AUGMENT_SHIFT:
        warnings.warn(
            f"augment=True shifts the {side}-pixel frames by up to {AUGMENT_SHIFT} pixels (EfficientZero's "
            "shift, for 96-pixel frames), with the borders replicated; on MinAtar's 10 x 10 frames that kept "
            "DelayedEZ at random play: pass augment=False for small frames",
            stacklevel=4,
        )


def update_on_batch(
    policy: DelayedEZPolicy,
    scaler: torch.amp.GradScaler,
    batch: ReplayBatch,
    targets: Targets,
    config: UpdateConfig,
    learning_rate: float,
) -> tuple[torch.Tensor, np.ndarray]:
    """One optimiser step of ``policy``'s network on ``batch``; the logged losses (:data:`LOGGED_LOSSES`, one
    tensor) and the batch's new priorities (``|predicted root value - value target|``)."""
    network, optimizer, device = policy.network, policy.optimizer, policy.device
    target_values, target_policies, policy_mask = targets
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    stacks = batch_stacks(batch, batch.policy_offset, config.frame_stack, device)
    obs, target_obs = stacks[:, 0], stacks[:, 1:]
    if config.augment and network.image:
        obs = random_intensity(random_shift(obs, AUGMENT_SHIFT))
        target_obs = random_intensity(random_shift(target_obs.flatten(0, 1), AUGMENT_SHIFT)).view(target_obs.shape)
    masks = {
        "value": torch.as_tensor(batch.value_mask, device=device),
        "policy": policy_mask,
        "value_prefix": torch.as_tensor(batch.value_prefix_mask, device=device),
        "consistency": torch.as_tensor(batch.consistency_mask, device=device),
    }
    with policy.autocast():
        losses = unroll_losses(
            network, obs, target_obs, torch.as_tensor(batch.actions, device=device), target_values, target_policies,
            torch.as_tensor(batch.target_value_prefix, device=device), masks, config.lstm_horizon,
        )
    weights = torch.as_tensor(batch.weights, device=device)
    loss = (weights * losses.weighted(config.coefficients)).mean()
    optimizer.zero_grad()
    scaler.scale(loss / config.num_unroll_steps).backward()
    scaler.unscale_(optimizer)  # the clip sees the true gradients (a no-op without float16)
    torch.nn.utils.clip_grad_norm_(network.parameters(), config.max_grad_norm)
    scaler.step(optimizer)  # skipped when float16 gradients overflowed; the scale then shrinks
    scaler.update()
    with torch.no_grad():
        predicted = network.to_scalar(losses.root_value_logits)
        priorities = (predicted - target_values[:, 0]).abs().cpu().numpy()
    names = ("value", "value_prefix", "policy", "consistency")
    logged = torch.stack([loss.detach(), *(getattr(losses, name).detach().mean() for name in names)])
    return logged, priorities
