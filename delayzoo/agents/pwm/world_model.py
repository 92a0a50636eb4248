"""PWM's world model (PaMoRL): categorical latents from single frames and a linear-recurrence sequence model.

Alignment of a window of ``T`` replayed steps (time-major inside this module):

- ``z_t`` is the posterior latent of observation ``o_t`` (from the frame alone);
- the sequence model reads ``(z_t, a_t)`` and emits ``h_t``; its memory restarts where ``is_first[t]``;
- from ``h_t`` the heads predict the reward ``r_t`` of that step, its continuation ``1 - terminal_t``
  and the prior of the next latent ``z_{t+1}``;
- the agent's feature at ``t`` is ``[z_t, h_{t-1}]`` (``h_{-1} = 0`` after a reset).

Training runs the sequence model over whole windows (:class:`~delayzoo.agents.pwm.sequence.SequenceModel`);
acting and imagination run it one step at a time. Both give the same outputs.

The public steps, for acting, imagination and planning code built on the world model:

- :meth:`WorldModel.encode`: the posterior ``q(z_t | o_t)`` of an observation (log-probabilities);
- :meth:`WorldModel.sample_latent`: a straight-through one-hot sample (or the mode) of log-probabilities;
- :meth:`WorldModel.step`: the sequence model's step ``(z_t, a_t, state) -> (h_t, state)``;
- :meth:`WorldModel.prior_step`: a step plus the prior ``p(z_{t+1} | h_t)`` and its sample;
- :meth:`WorldModel.initial_state`, :meth:`WorldModel.features`, :meth:`WorldModel.reward`,
  :meth:`WorldModel.continuation`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space
from torch import nn

from delayzoo.agents.common.transforms import (
    expectation,
    short_softmax,
    symexp,
    symlog,
    symlog_support,
    two_hot_target,
)
from delayzoo.agents.pwm.frames import (
    FRAME_LOSSES,
    FRAME_MODES,
    FrameDecoder,
    FrameEncoder,
    frame_reconstruction_loss,
    is_frame_space,
    norm2d,
)
from delayzoo.agents.pwm.sequence import GatedFeedForward, RecurrentState, SequenceModel

NORMS = ("batch", "group")
"""``norm`` choices: the reference's BatchNorm, or batch-independent GroupNorm(1, C) / LayerNorm."""


class ObservationLayout:
    """How an observation space splits into one image (channels-first uint8), one stack of small frames
    (with ``frames``) and one flat vector.

    Images of a ``Dict`` are stacked along channels, and so are frames; ``Box`` vectors are flattened,
    ``Discrete`` and ``MultiDiscrete`` parts are one-hot encoded and everything else is concatenated.

    :param observation_space: ``Box`` (image or vector), ``Discrete``, ``MultiDiscrete`` or a ``Dict`` of those.
    :param frames: read float ``(C, H, W)`` boxes in [0, 1] (:func:`~delayzoo.agents.pwm.frames.is_frame_space`,
        MinAtar's frames) as frames rather than as part of the vector.
    """

    def __init__(self, observation_space: spaces.Space, frames: bool = False) -> None:
        self.observation_space = observation_space
        self.is_dict = isinstance(observation_space, spaces.Dict)
        items = observation_space.spaces.items() if self.is_dict else [(None, observation_space)]
        self.image_keys: list[str | None] = []
        self.frame_keys: list[str | None] = []
        self.vector_keys: list[str | None] = []
        self.vector_sizes: list[int] = []
        image_size = None
        for key, space in items:
            name = "observation space" if key is None else f"observation key {key!r}"
            if isinstance(space, spaces.Box) and is_image_space(space, check_channels=False):
                if image_size is not None and tuple(space.shape[1:]) != image_size:
                    raise ValueError(f"All images must share height and width, got {space} for {name}")
                image_size = tuple(space.shape[1:])
                self.image_keys.append(key)
            elif frames and is_frame_space(space):
                if self.frame_keys and tuple(space.shape[1:]) != self._space(self.frame_keys[0]).shape[1:]:
                    raise ValueError(f"All frames must share height and width, got {space} for {name}")
                self.frame_keys.append(key)
            elif isinstance(space, (spaces.Box, spaces.Discrete, spaces.MultiDiscrete)):
                self.vector_keys.append(key)
                self.vector_sizes.append(_vector_size(space))
            else:
                raise ValueError(
                    f"Unsupported {name} {space}: PWM takes Box (image or vector), Discrete, MultiDiscrete "
                    "or a Dict of those"
                )
        self.image_shape = None
        if self.image_keys:
            channels = sum(self._space(key).shape[0] for key in self.image_keys)
            self.image_shape = (channels, *image_size)
        self.frame_shape = None
        if self.frame_keys:
            first = self._space(self.frame_keys[0]).shape
            self.frame_shape = (sum(self._space(key).shape[0] for key in self.frame_keys), *first[1:])
        self.vector_size = sum(self.vector_sizes)

    def _space(self, key: str | None) -> spaces.Space:
        return self.observation_space if key is None else self.observation_space.spaces[key]

    def _get(self, obs, key: str | None):
        return obs if key is None else obs[key]

    def image(self, obs, batch_dims: int) -> torch.Tensor | None:
        """Images as floats in [0, 1], shape ``batch + (C, H, W)``."""
        if not self.image_keys:
            return None
        parts = [self._get(obs, key).float() for key in self.image_keys]
        return torch.cat(parts, dim=batch_dims) / 255.0

    def frames(self, obs, batch_dims: int) -> torch.Tensor | None:
        """Frames as floats, shape ``batch + (C, H, W)``."""
        if not self.frame_keys:
            return None
        return torch.cat([self._get(obs, key).float() for key in self.frame_keys], dim=batch_dims)

    def vector(self, obs, batch_dims: int) -> torch.Tensor | None:
        """The non-image parts as one float vector, shape ``batch + (vector_size,)``."""
        if not self.vector_keys:
            return None
        parts = []
        for key in self.vector_keys:
            space, value = self._space(key), self._get(obs, key)
            batch = value.shape[:batch_dims]
            if isinstance(space, spaces.Discrete):
                parts.append(F.one_hot((value.long() - space.start).reshape(batch), int(space.n)).float())
            elif isinstance(space, spaces.MultiDiscrete):
                flat = value.long().reshape(*batch, -1)
                parts.extend(F.one_hot(flat[..., i], int(n)).float() for i, n in enumerate(space.nvec.flatten()))
            else:
                parts.append(value.float().reshape(*batch, -1))
        return torch.cat(parts, dim=-1)


def _vector_size(space: spaces.Space) -> int:
    if isinstance(space, spaces.Discrete):
        return int(space.n)
    if isinstance(space, spaces.MultiDiscrete):
        return int(np.sum(space.nvec))
    return int(np.prod(space.shape))


def mlp(in_size: int, units: int, layers: int, out_size: int | None = None) -> nn.Sequential:
    """``layers`` x (Linear, LayerNorm, SiLU), then an optional Linear read-out."""
    modules: list[nn.Module] = []
    for _ in range(layers):
        modules += [nn.Linear(in_size, units, bias=False), nn.LayerNorm(units), nn.SiLU()]
        in_size = units
    if out_size is not None:
        modules.append(nn.Linear(in_size, out_size))
    return nn.Sequential(*modules)


def _check_norm(norm: str) -> None:
    if norm not in NORMS:
        raise ValueError(f"Unknown norm {norm!r}: accepted values are {NORMS}")


def _check_frames(config: WorldModelConfig, layout: ObservationLayout) -> None:
    if config.frames not in FRAME_MODES:
        raise ValueError(f"Unknown frames {config.frames!r}: accepted values are {FRAME_MODES}")
    if config.frame_loss not in FRAME_LOSSES:
        raise ValueError(f"Unknown frame_loss {config.frame_loss!r}: accepted values are {FRAME_LOSSES}")
    channels = tuple(config.frame_channels)
    if not channels or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in channels):
        raise ValueError(f"frame_channels must be a non-empty tuple of positive ints, got {config.frame_channels!r}")
    if config.frames == "conv" and layout.frame_shape is None:
        raise ValueError(
            f"frames='conv' needs a float (C, H, W) Box with values in [0, 1] (e.g. MinAtar's frames) in the "
            f"observation space, got {layout.observation_space}"
        )
    if config.frames == "vector" and layout.frame_shape is not None:
        raise ValueError("the layout reads frames but frames='vector': build it with frames=False")


class LogitNorm(nn.Module):
    """Normalisation of latent logits over any leading dims: BatchNorm1d (the reference) or LayerNorm."""

    def __init__(self, norm: str, size: int) -> None:
        super().__init__()
        _check_norm(norm)
        self.norm = nn.BatchNorm1d(size) if norm == "batch" else nn.LayerNorm(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x.reshape(-1, x.shape[-1])).reshape(x.shape)


class ConvEncoder(nn.Module):
    """Stride-2 convolutions (kernel 4, no bias), each followed by a norm and SiLU: 64x64x3 -> 4x4x256."""

    def __init__(self, image_shape: tuple[int, int, int], channels: tuple[int, ...], norm: str = "batch") -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = image_shape[0]
        for out_channels in channels:
            conv = nn.Conv2d(in_channels, out_channels, 4, 2, 1, bias=False)
            layers += [conv, norm2d(norm, out_channels), nn.SiLU()]
            in_channels = out_channels
        self.net = nn.Sequential(*layers)
        sizes = [tuple(image_shape[1:])]
        for _ in channels:
            sizes.append((sizes[-1][0] // 2, sizes[-1][1] // 2))
        if min(sizes[-1]) < 1:
            raise ValueError(f"Image {image_shape} is too small for {len(channels)} stride-2 convolutions")
        self.sizes = sizes
        self.out_size = channels[-1] * sizes[-1][0] * sizes[-1][1]

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        batch = image.shape[:-3]
        # Channels-last activations: oneDNN's convolutions run about a quarter faster on CPU (fwd + bwd).
        image = image.reshape(-1, *image.shape[-3:]).contiguous(memory_format=torch.channels_last)
        return self.net(image).reshape(*batch, -1)


class ConvDecoder(nn.Module):
    """The reference's decoder from the latent alone: Linear (no bias) and a norm to the smallest feature
    map, transposed convolutions with norm and SiLU, a last transposed convolution and a sigmoid (pixels in [0, 1])."""

    def __init__(
        self,
        in_size: int,
        image_shape: tuple[int, int, int],
        encoder: ConvEncoder,
        channels: tuple[int, ...],
        norm: str = "batch",
    ) -> None:
        super().__init__()
        self.sizes = encoder.sizes[::-1]
        self.first_shape = (channels[-1], *self.sizes[0])
        self.linear = nn.Linear(in_size, int(np.prod(self.first_shape)), bias=False)
        self.first_norm = norm2d(norm, channels[-1])
        out_channels = list(channels[-2::-1]) + [image_shape[0]]
        self.deconvs = nn.ModuleList()
        self.norms = nn.ModuleList()
        in_channels = channels[-1]
        for index, out in enumerate(out_channels):
            last = index == len(out_channels) - 1
            self.deconvs.append(nn.ConvTranspose2d(in_channels, out, 4, 2, 1, bias=last))
            self.norms.append(nn.Sigmoid() if last else nn.Sequential(norm2d(norm, out), nn.SiLU()))
            in_channels = out

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        batch = latent.shape[:-1]
        x = self.first_norm(self.linear(latent).reshape(-1, *self.first_shape))
        x = x.contiguous(memory_format=torch.channels_last)  # as in ConvEncoder
        for deconv, norm, size in zip(self.deconvs, self.norms, self.sizes[1:]):
            x = norm(deconv(x, output_size=list(size)))
        return x.reshape(*batch, *x.shape[1:])


def reconstruction_loss(prediction: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
    """The reference's image loss: half the squared error summed over pixels, zero where the prediction
    truncates to the target's 8-bit value (``image`` holds bytes / 255), averaged over the batch dims."""
    same_byte = (prediction.detach() * 255.0).to(torch.uint8) == (image * 255.0).round().to(torch.uint8)
    residual = (prediction - image).masked_fill(same_byte, 0.0)
    return 0.5 * residual.square().sum((-3, -2, -1)).mean()


@dataclass
class WorldModelConfig:
    """Sizes, options and loss scales of the world model (defaults: the reference's Atari model).

    ``seq_divisor`` sets the key and value size of each cell's single matrix memory to
    ``seq_width // seq_divisor`` (4: 128 x 128 at width 512; the reference's DMC model uses 8).
    ``seq_readout_norm`` / ``seq_tanh``: RMSNorm on each cell's read-out (Atari) / ``tanh`` on ``h`` (DMC).
    ``norm``: ``"batch"`` (the reference's BatchNorm in the conv stages, the decoder and on the posterior
    and prior logits; needs at least 2 samples per training batch) or ``"group"`` (GroupNorm(1, C) and
    LayerNorm, independent of the batch).
    ``frames``: how a float ``(C, H, W)`` box in [0, 1] (MinAtar's frames) is read: ``"vector"`` (flattened
    into the vector part, as any other box) or ``"conv"`` (:mod:`~delayzoo.agents.pwm.frames`: side-keeping
    convolutions of ``frame_channels``, and a decoder of per-pixel logits trained by ``frame_loss``,
    ``"bce"`` or ``"mse"``).
    """

    stoch: int = 32
    classes: int = 32
    unimix: float = 0.01
    cnn_channels: tuple[int, ...] = (32, 64, 128, 256)
    mlp_units: int = 512
    mlp_layers: int = 2
    seq_width: int = 512
    seq_cells: int = 2
    seq_divisor: int = 4
    seq_dropout: float = 0.1
    seq_readout_norm: bool = True
    seq_tanh: bool = False
    norm: str = "batch"
    frames: str = "vector"
    frame_channels: tuple[int, ...] = (16, 32)
    frame_loss: str = "bce"
    reward_bins: int = 255
    free_bits: float = 1.0
    dyn_scale: float = 0.5
    rep_scale: float = 0.1


class WorldModel(nn.Module):
    """Encoder, decoder, sequence model and heads, with the training loss over replayed windows.

    :param layout: the observation layout.
    :param action_size: size of the action encoding (one-hot for ``Discrete``, the ``Box`` dimension).
    :param config: sizes, options and loss scales.
    :param scan_method: :func:`~delayzoo.agents.pwm.sequence.matrix_memory` method of the window pass.
    """

    def __init__(
        self, layout: ObservationLayout, action_size: int, config: WorldModelConfig, scan_method: str = "auto"
    ) -> None:
        super().__init__()
        _check_norm(config.norm)
        _check_frames(config, layout)
        self.layout, self.config, self.action_size, self.scan_method = layout, config, action_size, scan_method
        self.latent_size = config.stoch * config.classes
        self.feature_size = self.latent_size + config.seq_width
        embed_size = 0
        self.image_encoder = self.image_decoder = None
        if layout.image_shape is not None:
            channels = tuple(config.cnn_channels)
            self.image_encoder = ConvEncoder(layout.image_shape, channels, config.norm)
            self.image_decoder = ConvDecoder(
                self.latent_size, layout.image_shape, self.image_encoder, channels, config.norm
            )
            embed_size += self.image_encoder.out_size
        self.frame_encoder = self.frame_decoder = None
        if layout.frame_shape is not None:
            self.frame_encoder = FrameEncoder(layout.frame_shape, tuple(config.frame_channels), config.norm)
            self.frame_decoder = FrameDecoder(
                self.latent_size, layout.frame_shape, tuple(config.frame_channels), config.norm
            )
            embed_size += self.frame_encoder.out_size
        self.vector_encoder = self.vector_decoder = None
        if layout.vector_size:
            self.vector_encoder = mlp(layout.vector_size, config.mlp_units, config.mlp_layers)
            self.vector_decoder = mlp(self.latent_size, config.mlp_units, config.mlp_layers, layout.vector_size)
            embed_size += config.mlp_units
        self.posterior = nn.Sequential(
            nn.Linear(embed_size, self.latent_size, bias=False), LogitNorm(config.norm, self.latent_size)
        )
        self.sequence = SequenceModel(
            self.latent_size + action_size,
            config.seq_width,
            config.seq_cells,
            divisor=config.seq_divisor,
            dropout=config.seq_dropout,
            readout_norm=config.seq_readout_norm,
            tanh=config.seq_tanh,
        )
        self.prior = nn.Sequential(
            GatedFeedForward(config.seq_width, config.seq_dropout),
            nn.Linear(config.seq_width, self.latent_size),
            LogitNorm(config.norm, self.latent_size),
        )
        self.reward_head = mlp(config.seq_width, config.mlp_units, config.mlp_layers, config.reward_bins)
        self.continue_head = mlp(config.seq_width, config.mlp_units, config.mlp_layers, 1)
        for head in (self.reward_head, self.continue_head):
            nn.init.zeros_(head[-1].weight)
            nn.init.zeros_(head[-1].bias)
        self.register_buffer("reward_support", symlog_support(config.reward_bins), persistent=False)

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        probs = short_softmax(logits)
        return (1.0 - self.config.unimix) * probs + self.config.unimix / self.config.classes

    def latent_logits(self, logits: torch.Tensor) -> torch.Tensor:
        """Log-probabilities of the unimix categoricals, shape ``(..., stoch, classes)``."""
        logits = logits.reshape(*logits.shape[:-1], self.config.stoch, self.config.classes)
        return torch.log(self._probs(logits))

    def sample_latent(self, log_probs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """One-hot sample (or mode) of every categorical with straight-through gradients, flattened."""
        probs = log_probs.exp()
        if deterministic:
            index = probs.argmax(-1)
        else:
            uniform = torch.rand(*probs.shape[:-1], 1, device=probs.device, dtype=probs.dtype)
            index = (probs.detach().cumsum(-1) < uniform).sum(-1).clamp(max=self.config.classes - 1)
        one_hot = F.one_hot(index, self.config.classes).to(probs.dtype)
        sample = one_hot + probs - probs.detach()
        return sample.reshape(*sample.shape[:-2], -1)

    def encode(self, obs, batch_dims: int) -> torch.Tensor:
        """The posterior ``q(z_t | o_t)``: log-probabilities ``batch + (stoch, classes)`` of observations
        with ``batch_dims`` leading dims (from the frame alone, as in the reference)."""
        embeds = []
        image = self.layout.image(obs, batch_dims)
        if image is not None:
            embeds.append(self.image_encoder(image))
        frames = self.layout.frames(obs, batch_dims)
        if frames is not None:
            embeds.append(self.frame_encoder(frames))
        vector = self.layout.vector(obs, batch_dims)
        if vector is not None:
            embeds.append(self.vector_encoder(symlog(vector)))
        return self.latent_logits(self.posterior(torch.cat(embeds, dim=-1)))

    def prior_log_probs(self, h: torch.Tensor) -> torch.Tensor:
        """The prior ``p(z_{t+1} | h_t)``: log-probabilities ``(..., stoch, classes)``."""
        return self.latent_logits(self.prior(h))

    def initial_state(self, batch: int, device: torch.device | str | None = None) -> RecurrentState:
        """The recurrent state of ``batch`` episode starts (all zeros)."""
        return self.sequence.initial_state(batch, self.reward_support.device if device is None else device)

    def features(self, latent: torch.Tensor, readout: torch.Tensor) -> torch.Tensor:
        """The agent's input ``[z_t, h_{t-1}]``."""
        return torch.cat([latent, readout], dim=-1)

    def step(
        self,
        latent: torch.Tensor,
        action: torch.Tensor,
        state: RecurrentState,
        reset: torch.Tensor | None = None,
        in_place: bool = False,
    ) -> tuple[torch.Tensor, RecurrentState]:
        """Advance the sequence model by ``(z_t, a_t)`` (action encodings); returns ``h_t`` and the new
        state (see :meth:`SequenceModel.step` for ``reset`` and ``in_place``)."""
        return self.sequence.step(torch.cat([latent, action], dim=-1), reset, state, in_place=in_place)

    def prior_step(
        self,
        latent: torch.Tensor,
        action: torch.Tensor,
        state: RecurrentState,
        reset: torch.Tensor | None = None,
        in_place: bool = False,
        deterministic: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, RecurrentState]:
        """One imagined step: :meth:`step`, then a sample (or the mode) of the prior of the next latent.

        :return: ``h_t``, the next latent ``z_{t+1}`` (flattened one-hot) and the new state.
        """
        h, state = self.step(latent, action, state, reset, in_place)
        return h, self.sample_latent(self.prior_log_probs(h), deterministic), state

    def reward(self, h: torch.Tensor) -> torch.Tensor:
        """Expected reward of the step that produced ``h`` (symlog two-hot decoded)."""
        return symexp(expectation(self.reward_head(h), self.reward_support))

    def continuation(self, h: torch.Tensor) -> torch.Tensor:
        """Probability that the episode goes on after the step that produced ``h``."""
        return torch.sigmoid(self.continue_head(h).squeeze(-1))

    def loss(
        self,
        obs,
        action: torch.Tensor,
        reward: torch.Tensor,
        terminal: torch.Tensor,
        is_first: torch.Tensor,
    ) -> tuple[torch.Tensor, dict[str, float], dict[str, torch.Tensor]]:
        """World-model loss on time-major windows.

        :param obs: observations ``(T, B, ...)`` (tensor or dict of tensors).
        :param action: action encodings ``(T, B, action_size)``.
        :param reward: rewards ``(T, B)``; ``terminal``: ``(T, B)`` (terminated or life lost);
            ``is_first``: ``(T, B)`` booleans.
        :return: the loss, scalar metrics, and the imagination starts: ``latent`` ``(T, B, Z)`` and
            ``state`` (the recurrent state before every step, zero where ``is_first``), all detached.
            The states' ``matrix`` shares memory with the pass's saved tensors: modify it only after
            ``backward`` (imagination updates it in place).
        """
        steps, batch = reward.shape
        config = self.config
        if self.training and config.norm == "batch" and (steps - 1) * batch < 2:
            raise ValueError(
                f"norm='batch' needs at least 2 samples per training batch, got windows of {steps} steps x "
                f"{batch} (the prior sees (steps - 1) x batch samples): use a larger batch or norm='group'"
            )
        post = self.encode(obs, batch_dims=2)
        latent = self.sample_latent(post)

        reconstruction = torch.zeros((), device=reward.device)
        image = self.layout.image(obs, 2)
        if image is not None:
            reconstruction = reconstruction + reconstruction_loss(self.image_decoder(latent), image)
        frames = self.layout.frames(obs, 2)
        if frames is not None:
            reconstruction = reconstruction + frame_reconstruction_loss(
                self.frame_decoder(latent), frames, config.frame_loss
            )
        vector = self.layout.vector(obs, 2)
        if vector is not None:
            error = self.vector_decoder(latent) - symlog(vector)
            reconstruction = reconstruction + 0.5 * error.square().sum(-1).mean()

        initial = self.sequence.initial_state(batch, reward.device)
        h, starts, _ = self.sequence(torch.cat([latent, action], dim=-1), is_first, initial, method=self.scan_method)

        prior = self.prior_log_probs(h[:-1])
        target = post[1:]
        same_episode = (~is_first[1:]).float()
        dyn = _categorical_kl(target.detach(), prior).clamp(min=config.free_bits)
        rep = _categorical_kl(target, prior.detach()).clamp(min=config.free_bits)
        denominator = same_episode.sum().clamp(min=1.0)
        dyn_loss = (dyn * same_episode).sum() / denominator
        rep_loss = (rep * same_episode).sum() / denominator

        reward_target = two_hot_target(symlog(reward), self.reward_support)
        reward_loss = -(reward_target * torch.log_softmax(self.reward_head(h), -1)).sum(-1).mean()
        continue_loss = F.binary_cross_entropy_with_logits(self.continue_head(h).squeeze(-1), 1.0 - terminal.float())

        loss = reconstruction + config.dyn_scale * dyn_loss + config.rep_scale * rep_loss + reward_loss + continue_loss
        metrics = {
            "reconstruction_loss": reconstruction.item(),
            "dynamics_loss": dyn_loss.item(),
            "representation_loss": rep_loss.item(),
            "reward_loss": reward_loss.item(),
            "continuation_loss": continue_loss.item(),
            "world_model_loss": loss.item(),
        }
        return loss, metrics, {"latent": latent.detach(), "state": starts}


def _categorical_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) summed over the ``stoch`` categoricals: ``(..., stoch, classes) -> (...)``."""
    return (log_p.exp() * (log_p - log_q)).sum((-2, -1))
