"""Plain references for the DelayedEZ network and search: what the optimised code must reproduce exactly."""

from __future__ import annotations

import warnings

import torch
from torch.nn import functional as F

from delayzoo.agents.delayed_ez.networks import EfficientZeroNetwork, LSTMState, RecurrentOutput


def plain_mlp(layers: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A Linear/BatchNorm/ReLU stack run module by module, BatchNorm by ``nn.BatchNorm1d.forward`` itself."""
    for layer in layers:
        x = torch.nn.BatchNorm1d.forward(layer, x) if isinstance(layer, torch.nn.BatchNorm1d) else layer(x)
    return x


def plain_recurrent_inference(
    net: EfficientZeroNetwork, latent: torch.Tensor, lstm_state: LSTMState, action: torch.Tensor
) -> RecurrentOutput:
    """The MLP network's recurrent inference written with the plain torch modules (``nn.Sequential``,
    ``nn.BatchNorm1d``, ``nn.LayerNorm``, ``nn.LSTM``): the reference for its leaner implementation.

    ``nn.LSTM`` runs with oneDNN off, i.e. with torch's native LSTM-cell arithmetic.
    """
    one_hot = F.one_hot(action.long(), net.num_actions).to(latent.dtype)
    x = plain_mlp(net.dyn_mlp, torch.cat([latent, one_hot], dim=1))
    next_latent = net._normalize(F.relu(net.dyn_norm(x + latent)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the flags' note on TF32 for Intel GPUs
        with torch.backends.mkldnn.flags(enabled=False):
            out, state = net.lstm(next_latent.unsqueeze(0), lstm_state)
    prefix = plain_mlp(net.value_prefix_head, F.relu(torch.nn.BatchNorm1d.forward(net.value_prefix_bn, out[0])))
    return RecurrentOutput(
        next_latent, state, prefix, plain_mlp(net.value_head, next_latent), plain_mlp(net.policy_head, next_latent)
    )


class PlainNetwork:
    """An MLP :class:`EfficientZeroNetwork` seen through :func:`plain_recurrent_inference` (for a search)."""

    def __init__(self, net: EfficientZeroNetwork) -> None:
        self.net = net
        self.config = net.config

    def recurrent_inference(self, latent: torch.Tensor, lstm_state: LSTMState, action: torch.Tensor) -> RecurrentOutput:
        return plain_recurrent_inference(self.net, latent, lstm_state, action)

    def initial_lstm_state(self, batch_size: int) -> LSTMState:
        return self.net.initial_lstm_state(batch_size)

    def to_scalar(self, logits: torch.Tensor) -> torch.Tensor:
        return self.net.to_scalar(logits)
