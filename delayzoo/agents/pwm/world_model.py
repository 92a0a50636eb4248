"""PWM's world model (PaMoRL): categorical latents and a gated linear-recurrence sequence model.

Alignment of a window of ``T`` replayed steps (time-major inside this module):

- ``z_t`` is the posterior latent of observation ``o_t`` (from the frame alone);
- the sequence model reads ``(z_t, a_t)`` and emits ``h_t``; its memory restarts where ``is_first[t]``;
- from ``h_t`` the heads predict the reward ``r_t`` of that step, its continuation ``1 - terminal_t``
  and the prior of the next latent ``z_{t+1}``;
- the agent's feature at ``t`` is ``[z_t, h_{t-1}]`` (``h_{-1} = 0`` after a reset).

Training runs the sequence model over whole windows through :func:`linear_recurrence` (a segmented
scan); acting and imagination run it one step at a time. Both give the same outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from stable_baselines3.common.preprocessing import is_image_space
from torch import nn

from delayzoo.agents.common.scan import linear_recurrence
from delayzoo.agents.common.transforms import expectation, symexp, symlog, symlog_support, two_hot

RecurrentState = dict[str, torch.Tensor]
"""``matrix`` (B, cells, H, K, V), ``shift_time`` / ``shift_channel`` (B, cells, D), ``readout`` (B, D)."""


class ObservationLayout:
    """How an observation space splits into one image (channels-first uint8) and one flat vector.

    Images of a ``Dict`` are stacked along channels; ``Box`` vectors are flattened, ``Discrete`` and
    ``MultiDiscrete`` parts are one-hot encoded and everything non-image is concatenated.

    :param observation_space: ``Box`` (image or vector), ``Discrete``, ``MultiDiscrete`` or a ``Dict`` of those.
    """

    def __init__(self, observation_space: spaces.Space) -> None:
        self.observation_space = observation_space
        self.is_dict = isinstance(observation_space, spaces.Dict)
        items = observation_space.spaces.items() if self.is_dict else [(None, observation_space)]
        self.image_keys: list[str | None] = []
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
        self.vector_size = sum(self.vector_sizes)

    def _space(self, key: str | None) -> spaces.Space:
        return self.observation_space if key is None else self.observation_space.spaces[key]

    def _get(self, obs, key: str | None):
        return obs if key is None else obs[key]

    def image(self, obs, batch_dims: int) -> torch.Tensor | None:
        """Images as floats in [-0.5, 0.5], shape ``batch + (C, H, W)``."""
        if not self.image_keys:
            return None
        parts = [self._get(obs, key).float() for key in self.image_keys]
        return torch.cat(parts, dim=batch_dims) / 255.0 - 0.5

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


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension with a learned gain."""

    def __init__(self, size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + self.eps) * self.weight


def mlp(in_size: int, units: int, layers: int, out_size: int | None = None) -> nn.Sequential:
    """``layers`` x (Linear, LayerNorm, SiLU), then an optional Linear read-out."""
    modules: list[nn.Module] = []
    for _ in range(layers):
        modules += [nn.Linear(in_size, units, bias=False), nn.LayerNorm(units), nn.SiLU()]
        in_size = units
    if out_size is not None:
        modules.append(nn.Linear(in_size, out_size))
    return nn.Sequential(*modules)


def _token_shift(y: torch.Tensor, previous: torch.Tensor, reset: torch.Tensor) -> torch.Tensor:
    """``y[t-1]`` for every ``t`` (``previous`` before the window), zero where ``reset[t]``."""
    shifted = torch.cat([previous.unsqueeze(0), y[:-1]], dim=0)
    return shifted * (~reset).unsqueeze(-1).to(y.dtype)


class GatedLinearRecurrenceCell(nn.Module):
    """One cell: token-shifted gated linear recurrence (time mix) then a token-shifted MLP (channel mix).

    Time mix: ``S_t = diag(f_t) S_{t-1} + k_t v_t^T`` per head with data-dependent decay
    ``f_t = exp(-exp(w_t))``; the read-out ``S_t^T q_t`` is RMS-normalised per head and gated by
    ``silu(g_t)``. Every projection reads a learned mix of ``x_t`` and ``x_{t-1}`` (RWKV token shift).

    :param width: model width ``D``.
    :param heads: number of heads (state ``D/H x D/H`` each).
    :param ffn_ratio: hidden size of the channel mix relative to ``width``.
    """

    def __init__(self, width: int, heads: int, ffn_ratio: float = 2.0) -> None:
        super().__init__()
        if width % heads != 0:
            raise ValueError(f"seq_width {width} must be divisible by seq_heads {heads}")
        self.width, self.heads, self.head_size = width, heads, width // heads
        self.time_norm, self.channel_norm = RMSNorm(width), RMSNorm(width)
        self.time_mix = nn.Parameter(torch.full((5, width), 0.5))  # q, k, v, gate, decay
        self.query, self.key, self.value, self.gate = (nn.Linear(width, width, bias=False) for _ in range(4))
        self.decay = nn.Linear(width, width)
        nn.init.normal_(self.decay.weight, std=0.1 / math.sqrt(width))
        with torch.no_grad():  # decays from ~0.998 to ~0.55 across key channels at init
            self.decay.bias.copy_(torch.linspace(-6.0, -0.5, self.head_size).repeat(heads))
        self.readout_norm = RMSNorm(self.head_size)
        self.output = nn.Linear(width, width, bias=False)
        hidden = int(ffn_ratio * width)
        self.channel_mix = nn.Parameter(torch.full((2, width), 0.5))
        self.ffn_key = nn.Linear(width, hidden, bias=False)
        self.ffn_value = nn.Linear(hidden, width, bias=False)
        self.ffn_receptance = nn.Linear(width, width, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        reset: torch.Tensor,
        matrix: torch.Tensor,
        shift_time: torch.Tensor,
        shift_channel: torch.Tensor,
        method: str = "auto",
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Run a window.

        :param x: inputs ``(T, B, D)``.
        :param reset: ``(T, B)`` booleans, true where the memory restarts before step ``t``.
        :param matrix: memory before the window ``(B, H, K, V)``; ``shift_*``: last normed inputs ``(B, D)``.
        :param method: :func:`linear_recurrence` method.
        :return: outputs ``(T, B, D)``, memories after each step ``(T, B, H, K, V)``, and the normed
            inputs of each step for both token shifts ``(T, B, D)``.
        """
        steps, batch = x.shape[:2]
        y = self.time_norm(x)
        query, key, value, gate, decay = self._time_projections(y, _token_shift(y, shift_time, reset))
        update = key.unsqueeze(-1) * value.unsqueeze(-2)
        decay = decay.unsqueeze(-1)
        update[0] += decay[0] * matrix * (~reset[0]).to(x.dtype).view(batch, 1, 1, 1)  # memory before the window
        memories = linear_recurrence(decay, update, reset=reset, method=method)
        read = torch.einsum("tbhk,tbhkv->tbhv", query, memories)
        x = x + self.output(self.readout_norm(read).reshape(steps, batch, self.width) * F.silu(gate))
        z = self.channel_norm(x)
        return x + self._channel_mix(z, _token_shift(z, shift_channel, reset)), memories, y, z

    def step(
        self,
        x: torch.Tensor,
        matrix: torch.Tensor,
        shift_time: torch.Tensor,
        shift_channel: torch.Tensor,
        in_place: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step from ``(B, D)`` inputs and the state after the previous step (no reset here:
        pass a zero state instead); same outputs as :meth:`forward` with ``T = 1``, without its copies.

        :param in_place: update ``matrix`` itself (imagination, without autograd) instead of a new tensor.
        """
        y = self.time_norm(x)
        query, key, value, gate, decay = self._time_projections(y, shift_time)
        memory = matrix.mul_(decay.unsqueeze(-1)) if in_place else matrix * decay.unsqueeze(-1)
        memory.addcmul_(key.unsqueeze(-1), value.unsqueeze(-2))
        # One bmm per head: a cell's slice of the state is strided, which a single matmul would copy.
        read = torch.stack([torch.bmm(query[:, h, None], memory[:, h]).squeeze(1) for h in range(self.heads)], 1)
        x = x + self.output(self.readout_norm(read).reshape(x.shape[0], self.width) * F.silu(gate))
        z = self.channel_norm(x)
        return x + self._channel_mix(z, shift_channel), memory, y, z

    def _time_projections(self, y: torch.Tensor, previous: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Query, key, value ``(..., H, K)``, gate ``(..., D)`` and decay ``(..., H, K)`` from token-shifted inputs."""
        heads_shape = (*y.shape[:-1], self.heads, self.head_size)
        mixed = y.unsqueeze(0) + self.time_mix.view(5, *([1] * (y.ndim - 1)), self.width) * (previous - y).unsqueeze(0)
        query = self.query(mixed[0]).view(heads_shape) / math.sqrt(self.head_size)
        key = self.key(mixed[1]).view(heads_shape)
        value = self.value(mixed[2]).view(heads_shape)
        decay = torch.exp(-torch.exp(self.decay(mixed[4]).float())).to(y.dtype).view(heads_shape)
        return query, key, value, self.gate(mixed[3]), decay

    def _channel_mix(self, z: torch.Tensor, previous: torch.Tensor) -> torch.Tensor:
        delta = previous - z
        hidden = F.relu(self.ffn_key(z + self.channel_mix[0] * delta)).square()
        return torch.sigmoid(self.ffn_receptance(z + self.channel_mix[1] * delta)) * self.ffn_value(hidden)


class SequenceModel(nn.Module):
    """A stack of :class:`GatedLinearRecurrenceCell` over the embedded ``(z_t, a_t)`` pairs.

    :param input_size: size of the flattened latent plus the action encoding.
    :param width: model width (512 in the paper).
    :param cells: number of cells (2 in the paper).
    :param heads: heads per cell.
    """

    def __init__(self, input_size: int, width: int, cells: int, heads: int) -> None:
        super().__init__()
        self.width, self.cells, self.heads = width, cells, heads
        self.head_size = width // heads
        self.embed = nn.Sequential(nn.Linear(input_size, width, bias=False), RMSNorm(width))
        self.layers = nn.ModuleList(GatedLinearRecurrenceCell(width, heads) for _ in range(cells))
        self.out_norm = RMSNorm(width)

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> RecurrentState:
        """The all-zero state of an episode start."""
        zeros = lambda *shape: torch.zeros(batch, *shape, device=device)  # noqa: E731
        return {
            "matrix": zeros(self.cells, self.heads, self.head_size, self.head_size),
            "shift_time": zeros(self.cells, self.width),
            "shift_channel": zeros(self.cells, self.width),
            "readout": zeros(self.width),
        }

    def forward(
        self, inputs: torch.Tensor, reset: torch.Tensor, state: RecurrentState, method: str = "auto"
    ) -> tuple[torch.Tensor, RecurrentState]:
        """Window pass.

        :param inputs: ``(T, B, input_size)``.
        :param reset: ``(T, B)`` booleans (``is_first``).
        :param state: state before the window (see :data:`RecurrentState`).
        :param method: :func:`linear_recurrence` method.
        :return: read-outs ``h`` ``(T, B, D)`` and the states around every step, detached, each entry
            with a leading dimension of ``T + 1``: index 0 is ``state``, index ``t + 1`` the state after
            step ``t`` (``matrix`` ``(T + 1, B, cells, H, K, V)`` and so on).
        """
        steps = inputs.shape[0]
        states = {
            name: torch.empty(steps + 1, *value.shape, dtype=value.dtype, device=value.device)
            for name, value in state.items()
        }
        for name, value in state.items():
            states[name][0] = value
        x = self.embed(inputs)
        for index, layer in enumerate(self.layers):
            x, memory, y, z = layer(
                x,
                reset,
                state["matrix"][:, index],
                state["shift_time"][:, index],
                state["shift_channel"][:, index],
                method=method,
            )
            states["matrix"][1:, :, index] = memory.detach()
            states["shift_time"][1:, :, index] = y.detach()
            states["shift_channel"][1:, :, index] = z.detach()
        h = self.out_norm(x)
        states["readout"][1:] = h.detach()
        return h, states

    def step(
        self, inputs: torch.Tensor, reset: torch.Tensor | None, state: RecurrentState, in_place: bool = False
    ) -> tuple[torch.Tensor, RecurrentState]:
        """One step from ``inputs`` ``(B, input_size)``, restarting rows where ``reset`` ``(B,)`` is true.

        :param in_place: overwrite ``state["matrix"]`` with the new memory instead of allocating one
            (for long rollouts without autograd, e.g. imagination).
        :return: ``h`` ``(B, D)`` and the new state.
        """
        if in_place and torch.is_grad_enabled():
            raise ValueError("in_place steps are for rollouts without autograd: use torch.no_grad()")
        if reset is not None and bool(reset.any()):
            keep = (~reset).to(inputs.dtype)
            restart = lambda value: value * keep.view(-1, *([1] * (value.ndim - 1)))  # noqa: E731
            matrix = state["matrix"].mul_(keep.view(-1, 1, 1, 1, 1)) if in_place else restart(state["matrix"])
            state = {**{name: restart(value) for name, value in state.items() if name != "matrix"}, "matrix": matrix}
        x = self.embed(inputs)
        matrices, shifts_time, shifts_channel = [], [], []
        for index, layer in enumerate(self.layers):
            x, memory, y, z = layer.step(
                x,
                state["matrix"][:, index],
                state["shift_time"][:, index],
                state["shift_channel"][:, index],
                in_place=in_place,
            )
            matrices.append(memory)
            shifts_time.append(y)
            shifts_channel.append(z)
        h = self.out_norm(x)
        matrix = state["matrix"] if in_place else torch.stack(matrices, dim=1)
        return h, {
            "matrix": matrix,
            "shift_time": torch.stack(shifts_time, dim=1),
            "shift_channel": torch.stack(shifts_channel, dim=1),
            "readout": h,
        }


class ConvEncoder(nn.Module):
    """Stride-2 convolutions (kernel 4) with channel LayerNorm and SiLU: 64x64x3 -> 4x4x256 by default."""

    def __init__(self, image_shape: tuple[int, int, int], channels: tuple[int, ...]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        in_channels = image_shape[0]
        for out_channels in channels:
            layers += [
                nn.Conv2d(in_channels, out_channels, 4, 2, 1, bias=False),
                nn.GroupNorm(1, out_channels),
                nn.SiLU(),
            ]
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
        return self.net(image.reshape(-1, *image.shape[-3:])).reshape(*batch, -1)


class ConvDecoder(nn.Module):
    """Mirror of :class:`ConvEncoder`: latent -> image in [-0.5, 0.5] space (the mean of a unit Gaussian)."""

    def __init__(
        self, in_size: int, image_shape: tuple[int, int, int], encoder: ConvEncoder, channels: tuple[int, ...]
    ) -> None:
        super().__init__()
        self.sizes = encoder.sizes[::-1]
        self.first_shape = (channels[-1], *self.sizes[0])
        self.linear = nn.Linear(in_size, int(np.prod(self.first_shape)))
        out_channels = list(channels[-2::-1]) + [image_shape[0]]
        self.deconvs = nn.ModuleList()
        self.norms = nn.ModuleList()
        in_channels = channels[-1]
        for index, out in enumerate(out_channels):
            last = index == len(out_channels) - 1
            self.deconvs.append(nn.ConvTranspose2d(in_channels, out, 4, 2, 1, bias=last))
            self.norms.append(nn.Identity() if last else nn.Sequential(nn.GroupNorm(1, out), nn.SiLU()))
            in_channels = out

    def forward(self, latent: torch.Tensor) -> torch.Tensor:
        batch = latent.shape[:-1]
        x = self.linear(latent).reshape(-1, *self.first_shape)
        for deconv, norm, size in zip(self.deconvs, self.norms, self.sizes[1:]):
            x = norm(deconv(x, output_size=list(size)))
        return x.reshape(*batch, *x.shape[1:])


@dataclass
class WorldModelConfig:
    """Sizes of the world model (paper defaults)."""

    stoch: int = 32
    classes: int = 32
    unimix: float = 0.01
    cnn_channels: tuple[int, ...] = (32, 64, 128, 256)
    mlp_units: int = 512
    mlp_layers: int = 2
    seq_width: int = 512
    seq_cells: int = 2
    seq_heads: int = 4
    reward_bins: int = 255
    free_bits: float = 1.0
    dyn_scale: float = 0.5
    rep_scale: float = 0.1


class WorldModel(nn.Module):
    """Encoder, decoder, sequence model and heads, with the training loss over replayed windows.

    :param layout: the observation layout.
    :param action_size: size of the action encoding (one-hot for ``Discrete``, the ``Box`` dimension).
    :param config: sizes and loss scales.
    :param scan_method: :func:`linear_recurrence` method for the window pass.
    """

    def __init__(
        self, layout: ObservationLayout, action_size: int, config: WorldModelConfig, scan_method: str = "auto"
    ) -> None:
        super().__init__()
        self.layout, self.config, self.action_size, self.scan_method = layout, config, action_size, scan_method
        self.latent_size = config.stoch * config.classes
        self.feature_size = self.latent_size + config.seq_width
        embed_size = 0
        self.image_encoder = self.image_decoder = None
        if layout.image_shape is not None:
            self.image_encoder = ConvEncoder(layout.image_shape, tuple(config.cnn_channels))
            self.image_decoder = ConvDecoder(
                self.latent_size, layout.image_shape, self.image_encoder, tuple(config.cnn_channels)
            )
            embed_size += self.image_encoder.out_size
        self.vector_encoder = self.vector_decoder = None
        if layout.vector_size:
            self.vector_encoder = mlp(layout.vector_size, config.mlp_units, config.mlp_layers)
            self.vector_decoder = mlp(self.latent_size, config.mlp_units, config.mlp_layers, layout.vector_size)
            embed_size += config.mlp_units
        self.posterior = nn.Linear(embed_size, self.latent_size)
        self.sequence = SequenceModel(
            self.latent_size + action_size, config.seq_width, config.seq_cells, config.seq_heads
        )
        self.prior = mlp(config.seq_width, config.mlp_units, 1, self.latent_size)
        self.reward_head = mlp(config.seq_width, config.mlp_units, config.mlp_layers, config.reward_bins)
        self.continue_head = mlp(config.seq_width, config.mlp_units, config.mlp_layers, 1)
        nn.init.zeros_(self.reward_head[-1].weight)
        nn.init.zeros_(self.reward_head[-1].bias)
        self.register_buffer("reward_support", symlog_support(config.reward_bins), persistent=False)

    def _probs(self, logits: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax(logits, dim=-1)
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
        """Posterior log-probabilities ``batch + (stoch, classes)`` of preprocessed-by-layout observations."""
        embeds = []
        image = self.layout.image(obs, batch_dims)
        if image is not None:
            embeds.append(self.image_encoder(image))
        vector = self.layout.vector(obs, batch_dims)
        if vector is not None:
            embeds.append(self.vector_encoder(symlog(vector)))
        return self.latent_logits(self.posterior(torch.cat(embeds, dim=-1)))

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
        """Advance the sequence model by ``(z_t, a_t)``; returns ``h_t`` and the new state
        (see :meth:`SequenceModel.step` for ``reset`` and ``in_place``)."""
        return self.sequence.step(torch.cat([latent, action], dim=-1), reset, state, in_place=in_place)

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
            ``state`` (the recurrent state before every step, reset where ``is_first``), all detached.
        """
        steps, batch = reward.shape
        config = self.config
        post = self.encode(obs, batch_dims=2)
        latent = self.sample_latent(post)

        reconstruction = torch.zeros((), device=reward.device)
        image = self.layout.image(obs, 2)
        if image is not None:
            reconstruction = reconstruction + (self.image_decoder(latent) - image).square().sum((-3, -2, -1)).mean()
        vector = self.layout.vector(obs, 2)
        if vector is not None:
            reconstruction = reconstruction + (self.vector_decoder(latent) - symlog(vector)).square().sum(-1).mean()

        initial = self.sequence.initial_state(batch, reward.device)
        h, states = self.sequence(torch.cat([latent, action], dim=-1), is_first, initial, method=self.scan_method)

        prior = self.latent_logits(self.prior(h[:-1]))
        target = post[1:]
        same_episode = (~is_first[1:]).float()
        dyn = _categorical_kl(target.detach(), prior).clamp(min=config.free_bits)
        rep = _categorical_kl(target, prior.detach()).clamp(min=config.free_bits)
        denominator = same_episode.sum().clamp(min=1.0)
        dyn_loss = (dyn * same_episode).sum() / denominator
        rep_loss = (rep * same_episode).sum() / denominator

        reward_target = two_hot(symlog(reward), self.reward_support)
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
        keep = (~is_first).to(h.dtype)
        previous = {
            name: value[:-1].mul_(keep.view(steps, batch, *([1] * (value.ndim - 2)))) for name, value in states.items()
        }
        return loss, metrics, {"latent": latent.detach(), "state": previous}


def _categorical_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) summed over the ``stoch`` categoricals: ``(..., stoch, classes) -> (...)``."""
    return (log_p.exp() * (log_p - log_q)).sum((-2, -1))
