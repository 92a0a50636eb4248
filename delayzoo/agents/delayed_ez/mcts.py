"""Batched MCTS over :mod:`delayzoo.ctree` and the delay-aware forecast of the search roots.

One search runs all roots (all envs, or all reanalysed positions) together: each simulation
descends every tree once, the new leaves go through one batched ``recurrent_inference``, and the
results are backed up in every tree at once. The value-prefix LSTM is reset below every node whose
depth is a multiple of ``lstm_horizon`` (EfficientZero's ``lstm_horizon_len``), exactly as in training.
"""

from __future__ import annotations

from types import ModuleType
from typing import Callable, NamedTuple

import numpy as np
import torch

from delayzoo.agents.common.pending import roll_through_pending
from delayzoo.agents.delayed_ez.networks import EfficientZeroNetwork, LSTMState

import delayzoo.ctree

__all__ = ["MCTS", "SearchOutput", "forecast_latents"]


class SearchOutput(NamedTuple):
    """Result of one batched search: root visit counts ``(B, A)`` and root values ``(B,)``."""

    visits: np.ndarray
    root_values: np.ndarray


def _check_finite(name: str, value: torch.Tensor, simulation: int) -> None:
    if not torch.isfinite(value).all():
        bad = torch.nonzero(~torch.isfinite(value.reshape(value.shape[0], -1)).all(dim=1)).flatten().tolist()
        raise ValueError(
            f"non-finite {name} from the model at simulation {simulation} for roots {bad}; "
            "the network has diverged (lower the learning rate or check the rewards)"
        )


def forecast_latents(
    step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    latent: torch.Tensor,
    pending_actions: torch.Tensor,
    delays: torch.Tensor,
) -> torch.Tensor:
    """Roll each latent forward through its own pending actions.

    Row ``b`` becomes ``step(...step(latent[b], pending[b, 0])..., pending[b, delays[b] - 1])``;
    rows with different delays are batched: at roll step ``k`` only the rows with ``delays > k``
    are stepped.

    :param step: ``(latents (n, ...), actions (n,)) -> next latents``
    :param latent: ``(B, ...)`` latents at decision time
    :param pending_actions: ``(B, max_delay)`` integer actions, entries at positions ``>= delay`` are ignored
    :param delays: ``(B,)`` integer delays
    :return: latents at execution time, ``(B, ...)``
    """
    return roll_through_pending(step, latent, pending_actions.long().to(latent.device), delays.to(latent.device))


class MCTS:
    """EfficientZero's pUCT search, batched over roots.

    :param num_actions: size of the discrete action space
    :param num_simulations: simulations per search (each expands one node per root)
    :param discount: discount of the backed-up values
    :param pb_c_base: pUCT c2
    :param pb_c_init: pUCT c1
    :param dirichlet_alpha: root noise concentration
    :param exploration_fraction: root noise weight
    :param lstm_horizon: reset the value-prefix LSTM below nodes at depths that are multiples of this
    :param tree: the tree implementation, :mod:`delayzoo.ctree` (compiled when built, else the Python
        twin) by default; :mod:`delayzoo.ctree.ptree` forces the Python twin
    """

    def __init__(
        self,
        num_actions: int,
        num_simulations: int = 50,
        discount: float = 0.997**4,
        pb_c_base: float = 19652.0,
        pb_c_init: float = 1.25,
        dirichlet_alpha: float = 0.3,
        exploration_fraction: float = 0.25,
        lstm_horizon: int = 5,
        tree: ModuleType | None = None,
    ) -> None:
        if num_simulations < 1:
            raise ValueError(f"num_simulations must be >= 1, got {num_simulations}")
        if lstm_horizon < 1:
            raise ValueError(f"lstm_horizon must be >= 1, got {lstm_horizon}")
        self.num_actions = num_actions
        self.num_simulations = num_simulations
        self.discount = discount
        self.pb_c_base = pb_c_base
        self.pb_c_init = pb_c_init
        self.dirichlet_alpha = dirichlet_alpha
        self.exploration_fraction = exploration_fraction
        self.lstm_horizon = lstm_horizon
        self.tree = delayzoo.ctree if tree is None else tree

    @torch.no_grad()
    def search(
        self,
        network: EfficientZeroNetwork,
        root_latent: torch.Tensor,
        root_policy_logits: torch.Tensor,
        rng: np.random.Generator,
        add_noise: bool,
    ) -> SearchOutput:
        """Search from ``B`` root latents (their value-prefix LSTM starts from zeros).

        :param network: the model (in eval mode)
        :param root_latent: ``(B, *latent_shape)``
        :param root_policy_logits: ``(B, A)`` prior logits at the roots
        :param rng: draws the tie-break seed and, with ``add_noise``, the Dirichlet noise
        :param add_noise: Dirichlet noise at the roots (training only)
        """
        batch = root_latent.shape[0]
        device = root_latent.device
        _check_finite("root policy logits", root_policy_logits, 0)
        noise = None
        if add_noise:
            noise = rng.dirichlet([self.dirichlet_alpha] * self.num_actions, size=batch)
        tree = self.tree
        roots = tree.Roots(batch, self.num_actions, self.num_simulations + 1, int(rng.integers(2**31 - 1)))
        roots.prepare(
            np.zeros(batch), root_policy_logits.float().cpu().numpy(), noise, self.exploration_fraction
        )
        minmax = tree.MinMaxStatsList(batch)
        results = tree.SearchResults(batch)
        # latents and LSTM states by (simulation index, root)
        latents = root_latent.new_empty((self.num_simulations + 1, *root_latent.shape))
        latents[0] = root_latent
        h0, _ = network.initial_lstm_state(batch)
        hidden = h0.new_zeros((self.num_simulations + 1, batch, h0.shape[-1]))
        cell = torch.zeros_like(hidden)
        depth = np.zeros((self.num_simulations + 1, batch), dtype=np.int64)
        for sim in range(1, self.num_simulations + 1):
            parent, roots_index, action = tree.batch_traverse(
                roots, self.pb_c_init, self.pb_c_base, self.discount, minmax, results
            )
            parent_t = torch.as_tensor(parent, device=device)
            index_t = torch.as_tensor(roots_index, device=device)
            state: LSTMState = (hidden[parent_t, index_t].unsqueeze(0), cell[parent_t, index_t].unsqueeze(0))
            out = network.recurrent_inference(
                latents[parent_t, index_t], state, torch.as_tensor(action, device=device)
            )
            value_prefix = network.to_scalar(out.value_prefix_logits)
            value = network.to_scalar(out.value_logits)
            _check_finite("latent", out.latent, sim)
            _check_finite("value prefix", value_prefix, sim)
            _check_finite("value", value, sim)
            _check_finite("policy logits", out.policy_logits, sim)
            depth[sim, roots_index] = depth[parent, roots_index] + 1
            is_reset = depth[sim, roots_index] % self.lstm_horizon == 0
            reset_t = torch.as_tensor(is_reset, device=device).view(-1, 1)
            latents[sim, index_t] = out.latent
            hidden[sim, index_t] = out.lstm_state[0].squeeze(0).masked_fill(reset_t, 0.0)
            cell[sim, index_t] = out.lstm_state[1].squeeze(0).masked_fill(reset_t, 0.0)
            tree.batch_backpropagate(
                sim,
                self.discount,
                value_prefix.cpu().numpy(),
                value.cpu().numpy(),
                out.policy_logits.float().cpu().numpy(),
                minmax,
                results,
                is_reset,
            )
        return SearchOutput(np.asarray(roots.distributions()), np.asarray(roots.values()))
