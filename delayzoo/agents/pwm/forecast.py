"""PWM's forecast under execution delay: the state of the current observation rolled with the prior
through the actions the env will execute before the next decision takes effect."""

from __future__ import annotations

import torch

from delayzoo.agents.common.pending import roll_through_pending
from delayzoo.agents.pwm.world_model import RecurrentState, WorldModel


def forecast_state(
    world_model: WorldModel,
    latent: torch.Tensor,
    state: RecurrentState,
    actions: torch.Tensor,
    delays: torch.Tensor,
    deterministic: bool = False,
) -> tuple[torch.Tensor, RecurrentState]:
    """Imagine each env's own pending steps with :meth:`WorldModel.prior_step` (``z, s, a -> z', s'``).

    :param world_model: the world model whose sequence model and prior are rolled
    :param latent: ``(B, Z)`` posterior latents of the current observations
    :param state: the recurrent state before them (batch ``B``)
    :param actions: ``(B, max_delay, action_size)`` world-model encodings of the pending actions
    :param delays: ``(B,)`` each env's delay: row ``b`` takes ``delays[b]`` steps (0: unchanged)
    :param deterministic: use the prior's modes instead of samples
    :return: the latents and recurrent states at the step where the next decision takes effect
    """

    def step(carry: dict[str, torch.Tensor], action: torch.Tensor) -> dict[str, torch.Tensor]:
        state_rows = {name: carry[name] for name in state}
        _, latent_rows, after = world_model.prior_step(carry["latent"], action, state_rows, deterministic=deterministic)
        return {"latent": latent_rows, **after}

    out = roll_through_pending(step, {"latent": latent, **state}, actions, delays)
    return out.pop("latent"), out
