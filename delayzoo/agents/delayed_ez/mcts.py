"""Batched MCTS over :mod:`delayzoo.ctree` (pUCT or Gumbel) and the delay-aware forecast of the search roots.

One search runs all roots (all envs, or all reanalysed positions) together: each simulation
descends every tree once, the new leaves go through one batched ``recurrent_inference``, and the
results are backed up in every tree at once. The value-prefix LSTM is reset below every node whose
depth is a multiple of ``lstm_horizon`` (EfficientZero's ``lstm_horizon_len``), exactly as in training.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import NamedTuple

import numpy as np
import torch

import delayzoo.ctree
from delayzoo.agents.common.pending import roll_through_pending
from delayzoo.agents.delayed_ez.config import SearchConfig
from delayzoo.agents.delayed_ez.networks import EfficientZeroNetwork, LSTMState

__all__ = ["MCTS", "SearchOutput", "forecast_latents", "forecast_roots"]


class SearchOutput(NamedTuple):
    """Result of one batched search.

    :param visits: root visit counts ``(B, A)``
    :param root_values: root values ``(B,)``, the mean of the values backed up into each root
    :param policy: the weights of the policy targets ``(B, A)``, to be normalised: the visit counts under pUCT,
        the improved policy under Gumbel
    :param actions: ``(B,)`` the search's choice: the most visited action under pUCT (ties: the lowest), the
        selected action under Gumbel
    """

    visits: np.ndarray
    root_values: np.ndarray
    policy: np.ndarray
    actions: np.ndarray


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


def forecast_roots(
    network: EfficientZeroNetwork, latent: torch.Tensor, pending_actions: torch.Tensor, delays: torch.Tensor
) -> tuple[torch.Tensor, LSTMState]:
    """Roll each latent and its value-prefix LSTM state (from zeros) through its own pending actions.

    The Delayed-EZ reference's forward roll: the search then starts from the rolled latent with the
    rolled LSTM state (no reset during the roll; a row with delay 0 keeps the zero state).

    :return: latents ``(B, ...)`` and LSTM state ``(h, c)``, each ``(1, B, lstm_hidden_size)``
    """
    h0, c0 = network.initial_lstm_state(latent.shape[0])

    def step(carry: dict[str, torch.Tensor], actions: torch.Tensor) -> dict[str, torch.Tensor]:
        state = (carry["h"].unsqueeze(0), carry["c"].unsqueeze(0))
        next_latent, (h, c), _ = network.dynamics(carry["latent"], actions, state)
        return {"latent": next_latent, "h": h[0], "c": c[0]}

    carry = {"latent": latent, "h": h0[0], "c": c0[0]}
    out = roll_through_pending(step, carry, pending_actions.long().to(latent.device), delays.to(latent.device))
    return out["latent"], (out["h"].unsqueeze(0), out["c"].unsqueeze(0))


class MCTS:
    """EfficientZero's pUCT search or Gumbel MuZero's (``config.method``), batched over roots.

    Per simulation the driver makes one host-to-device copy (parent slots and actions) and one
    device-to-host copy (value prefixes, values and policy logits together); the tree checks those
    for finiteness, and the new latents are checked once per search.

    :param num_actions: size of the discrete action space
    :param config: the search hyperparameters
    :param tree: the tree implementation, :mod:`delayzoo.ctree` (compiled when built, else the Python
        twin) by default; :mod:`delayzoo.ctree.ptree` forces the Python twin
    """

    def __init__(self, num_actions: int, config: SearchConfig | None = None, tree: ModuleType | None = None) -> None:
        if isinstance(num_actions, bool) or not isinstance(num_actions, int) or num_actions < 1:
            raise ValueError(f"num_actions must be an integer >= 1, got {num_actions!r}")
        self.num_actions = num_actions
        self.config = SearchConfig() if config is None else config
        self.tree = delayzoo.ctree if tree is None else tree

    @torch.inference_mode()
    def search(
        self,
        network: EfficientZeroNetwork,
        root_latent: torch.Tensor,
        root_policy_logits: torch.Tensor,
        rng: np.random.Generator,
        add_noise: bool,
        root_lstm_state: LSTMState | None = None,
        root_value_logits: torch.Tensor | None = None,
    ) -> SearchOutput:
        """Search from ``B`` root latents (their value-prefix LSTM starts from zeros unless ``root_lstm_state``
        is given; the roots' own value prefixes are 0 either way).

        Runs under ``torch.inference_mode`` (only numpy arrays leave it).

        :param network: the model (in eval mode)
        :param root_latent: ``(B, *latent_shape)``
        :param root_policy_logits: ``(B, A)`` prior logits at the roots
        :param rng: draws the root noise and the tie-break seed
        :param add_noise: root noise: pUCT's Dirichlet noise, or Gumbel noise at ``gumbel_scale`` (without it the
            Gumbel search is deterministic but for ties)
        :param root_lstm_state: ``(h, c)``, each ``(1, B, lstm_hidden_size)``: the roots' value-prefix LSTM
            state (the reference's forecast roots carry the state of the forward roll)
        :param root_value_logits: ``(B, support)`` the network's value logits at the roots, read only by a search
            that needs the roots' values (Gumbel's mixed value, per-node normalisation; zeros when ``None``)
        """
        config = self.config
        simulations = config.num_simulations
        batch = root_latent.shape[0]
        device = root_latent.device
        root_logits = root_policy_logits.double().cpu().numpy()
        if not np.isfinite(root_logits).all():
            bad = np.flatnonzero(~np.isfinite(root_logits).all(axis=1)).tolist()
            raise ValueError(f"non-finite root policy logits for roots {bad}; the network has diverged")
        shape = (batch, self.num_actions)
        noise = gumbel = None
        if config.gumbel:
            gumbel = rng.gumbel(size=shape) * config.gumbel_scale if add_noise else np.zeros(shape)
        elif add_noise:
            noise = rng.dirichlet([config.dirichlet_alpha] * self.num_actions, size=batch)
        values = None
        if root_value_logits is not None and config.uses_root_values:
            values = network.to_scalar(root_value_logits).double().cpu().numpy()
        tree = self.tree
        roots = tree.Roots(batch, self.num_actions, simulations + 1, int(rng.integers(2**31 - 1)))
        roots.prepare(
            np.zeros(batch), root_logits, noise, config.exploration_fraction, None, values, gumbel,
            config.num_considered_actions,
        )
        minmax = tree.MinMaxStatsList(batch, q_normalization=config.q_normalization)
        results = tree.SearchResults(batch)
        # latents and LSTM states of node (simulation s, root b) in row s * B + b; simulation s writes rows s * B..
        latents = root_latent.new_empty(((simulations + 1) * batch, *root_latent.shape[1:]))
        latents[:batch] = root_latent
        h0, _ = network.initial_lstm_state(batch)
        hidden = h0.new_zeros(((simulations + 1) * batch, h0.shape[-1]))
        cell = torch.zeros_like(hidden)
        if root_lstm_state is not None:
            hidden[:batch], cell[:batch] = root_lstm_state[0][0], root_lstm_state[1][0]
        depth = np.zeros((simulations + 1, batch), dtype=np.int64)
        columns = np.arange(batch)
        for sim in range(1, simulations + 1):
            if config.gumbel:
                parent, _, action = tree.batch_traverse_gumbel(
                    roots, config.c_visit, config.c_scale, config.discount, minmax, results
                )
            else:
                parent, _, action = tree.batch_traverse(
                    roots, config.pb_c_init, config.pb_c_base, config.discount, minmax, results
                )
            parent = np.asarray(parent, dtype=np.int64)
            depth[sim] = depth[parent, columns] + 1
            is_reset = depth[sim] % config.lstm_horizon == 0
            moves = torch.from_numpy(np.stack([parent * batch + columns, np.asarray(action, dtype=np.int64), is_reset]))
            moves = moves.to(device)
            rows, action_t = moves[0], moves[1]
            state: LSTMState = (hidden.index_select(0, rows).unsqueeze(0), cell.index_select(0, rows).unsqueeze(0))
            out = network.recurrent_inference(latents.index_select(0, rows), state, action_t)
            new_rows = slice(sim * batch, (sim + 1) * batch)
            latents[new_rows] = out.latent
            next_hidden, next_cell = out.lstm_state[0][0], out.lstm_state[1][0]
            if is_reset.any():
                reset_t = moves[2].bool().view(-1, 1)
                next_hidden, next_cell = next_hidden.masked_fill(reset_t, 0.0), next_cell.masked_fill(reset_t, 0.0)
            hidden[new_rows] = next_hidden
            cell[new_rows] = next_cell
            # one device-to-host copy: value prefixes, values, policy logits
            host = torch.cat(
                [
                    network.to_scalar(out.value_prefix_logits).view(-1),
                    network.to_scalar(out.value_logits).view(-1),
                    out.policy_logits.float().view(-1),
                ]
            ).double().cpu().numpy()
            try:
                tree.batch_backpropagate(
                    sim, config.discount, host[:batch], host[batch : 2 * batch],
                    host[2 * batch :].reshape(batch, -1), minmax, results, is_reset,
                )
            except ValueError as error:
                raise ValueError(
                    f"non-finite value, value prefix or policy logits from the model at simulation {sim} ({error}); "
                    "the network has diverged (lower the learning rate or check the rewards)"
                ) from error
        # one sum instead of an elementwise mask (a third of a MinAtar round's checks): NaN and +-inf carry into
        # the sum, and a finite sum past float range means the latents have blown up all the same
        if not bool(latents.sum().isfinite()):
            raise ValueError(
                "non-finite or overflowing latents from the model's dynamics during the search; "
                "the network has diverged"
            )
        visits = np.asarray(roots.distributions())
        if config.gumbel:
            actions, policy = tree.gumbel_outputs(roots, config.c_visit, config.c_scale, config.discount, minmax)
        else:
            actions, policy = np.argmax(visits, axis=1), visits.astype(np.float64)
        return SearchOutput(visits, np.asarray(roots.values()), np.asarray(policy), np.asarray(actions, dtype=np.int64))
