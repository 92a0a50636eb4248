"""PWM's encoder and decoder for small multi-channel frames (``WorldModelConfig.frames="conv"``).

MinAtar's observations are float ``(C, 10, 10)`` frames whose channels are binary (one per object
kind). The paper's image path does not fit them: it takes 8-bit pixels (divided by 255, reconstructed
to the byte) and halves the side at each of its stride-2 convolutions (10 -> 5 -> 2, and its decoder
gives 2 -> 4 -> 8, not 10). Here the convolutions keep the side (kernel 3, stride 1, padding 1), the
decoder mirrors the encoder from a linear map of the latent, and its outputs are per-pixel logits,
trained by a Bernoulli likelihood (``frame_loss="bce"``) or the squared error of their sigmoid
(``"mse"``, the paper's loss without the byte rounding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from gymnasium import spaces
from torch import nn

FRAME_MODES = ("vector", "conv")
"""``WorldModelConfig.frames``: read small frames as one flat vector (the default) or with :class:`FrameEncoder`."""

FRAME_LOSSES = ("bce", "mse")
"""``WorldModelConfig.frame_loss``: Bernoulli likelihood of the logits, or squared error of their sigmoid."""


def is_frame_space(space: spaces.Space) -> bool:
    """A float ``Box`` of shape ``(C, H, W)`` with every value in [0, 1] (MinAtar's frames)."""
    return (
        isinstance(space, spaces.Box)
        and len(space.shape) == 3
        and space.dtype.kind == "f"
        and bool((space.low >= 0).all() and (space.high <= 1).all())
    )


def norm2d(norm: str, channels: int) -> nn.Module:
    """The world model's norm of feature maps: ``"batch"`` BatchNorm2d, ``"group"`` GroupNorm(1, C)."""
    return nn.BatchNorm2d(channels) if norm == "batch" else nn.GroupNorm(1, channels)


def _conv_block(in_channels: int, out_channels: int, norm: str) -> list[nn.Module]:
    return [nn.Conv2d(in_channels, out_channels, 3, 1, 1, bias=False), norm2d(norm, out_channels), nn.SiLU()]


class FrameEncoder(nn.Module):
    """Side-keeping convolutions (kernel 3, stride 1, no bias), each with a norm and SiLU, then flattened.

    :param frame_shape: ``(C, H, W)``.
    :param channels: output channels of each convolution.
    :param norm: ``"batch"`` or ``"group"``, as the world model's other norms.
    """

    def __init__(self, frame_shape: tuple[int, int, int], channels: tuple[int, ...], norm: str) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = frame_shape[0]
        for out_channels in channels:
            layers += _conv_block(in_channels, out_channels, norm)
            in_channels = out_channels
        self.net = nn.Sequential(*layers)
        self.out_size = channels[-1] * frame_shape[1] * frame_shape[2]

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        batch = frames.shape[:-3]
        return self.net(frames.reshape(-1, *frames.shape[-3:])).reshape(*batch, -1)


class FrameDecoder(nn.Module):
    """The encoder mirrored: a linear map of the latent to the last feature map (with a norm and SiLU),
    side-keeping convolutions back through the encoder's channels, and a last convolution to per-pixel
    logits of every channel.

    :param in_size: latent size.
    :param frame_shape: ``(C, H, W)``.
    :param channels: the encoder's channels.
    :param norm: ``"batch"`` or ``"group"``.
    """

    def __init__(self, in_size: int, frame_shape: tuple[int, int, int], channels: tuple[int, ...], norm: str) -> None:
        super().__init__()
        self.first_shape = (channels[-1], *frame_shape[1:])
        self.linear = nn.Linear(in_size, channels[-1] * frame_shape[1] * frame_shape[2], bias=False)
        layers: list[nn.Module] = [norm2d(norm, channels[-1]), nn.SiLU()]
        for in_channels, out_channels in zip(channels[:0:-1], channels[-2::-1]):
            layers += _conv_block(in_channels, out_channels, norm)
        layers.append(nn.Conv2d(channels[0], frame_shape[0], 3, 1, 1))
        self.net = nn.Sequential(*layers)

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        """Logits ``latent.shape[:-1] + (C, H, W)``."""
        batch = latent.shape[:-1]
        x = self.net(self.linear(latent).reshape(-1, *self.first_shape))
        return x.reshape(*batch, *x.shape[1:])


def frame_reconstruction_loss(logits: torch.Tensor, frames: torch.Tensor, loss: str) -> torch.Tensor:
    """The reconstruction loss of frames in [0, 1], summed over ``(C, H, W)`` and averaged over the batch dims.

    ``"bce"``: the Bernoulli negative log-likelihood of each pixel under ``sigmoid(logits)``; ``"mse"``:
    half the squared error of ``sigmoid(logits)``, as the paper's image loss.
    """
    if loss == "bce":
        per_pixel = F.binary_cross_entropy_with_logits(logits, frames, reduction="none")
    else:
        per_pixel = 0.5 * (torch.sigmoid(logits) - frames).square()
    return per_pixel.sum((-3, -2, -1)).mean()
