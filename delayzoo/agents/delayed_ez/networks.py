"""EfficientZero's networks: representation, dynamics with an LSTM value-prefix head, prediction, SimSiam heads.

Two families share one interface (:class:`EfficientZeroNetwork`):

- images (``C x H x W``): the residual conv net of EfficientZero, with its down-sampling stem
  (96x96 -> 6x6) for large frames; latents are ``num_channels x h x w`` maps, the action enters
  the dynamics as a constant plane ``a / num_actions``;
- vectors: MLPs with a residual dynamics block; latents are vectors of ``latent_dim``, the action
  enters as a one-hot vector.

Latents can be min-max normalised to [0, 1] per sample after the representation and every dynamics
step (``state_norm``): off for the conv family, as in EfficientZero's Atari model, and on for the
vector family, where it keeps the small MLP latents bounded (our choice). Values and value prefixes are
categorical over ``2 * support_size + 1`` integer bins in ``h``-space
(:func:`~delayzoo.agents.common.transforms.h_transform`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn
from torch.nn import functional as F

from delayzoo.agents.common.transforms import expectation, h_inverse, integer_support

__all__ = [
    "ConvNetworkConfig",
    "EfficientZeroNetwork",
    "InitialOutput",
    "LSTMState",
    "MlpNetworkConfig",
    "RecurrentOutput",
    "build_network",
]

LSTMState = tuple[torch.Tensor, torch.Tensor]
"""The value-prefix LSTM's ``(h, c)`` state."""


class InitialOutput(NamedTuple):
    """What :meth:`EfficientZeroNetwork.initial_inference` returns."""

    latent: torch.Tensor
    value_logits: torch.Tensor
    policy_logits: torch.Tensor


class RecurrentOutput(NamedTuple):
    """What :meth:`EfficientZeroNetwork.recurrent_inference` returns."""

    latent: torch.Tensor
    lstm_state: LSTMState
    value_prefix_logits: torch.Tensor
    value_logits: torch.Tensor
    policy_logits: torch.Tensor


class BatchNorm1d(nn.BatchNorm1d):
    """Batch norm that uses its running statistics for a training batch of one sample.

    ``nn.BatchNorm1d`` cannot normalise a single sample in training mode; the reference code
    crashes at batch size 1 for that reason. In eval mode it calls the kernel directly (the same
    computation as ``nn.BatchNorm1d``, without its per-call bookkeeping, which the search pays
    at every simulation).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return torch.batch_norm(
                x, self.weight, self.bias, self.running_mean, self.running_var, False, 0.0, self.eps,
                torch.backends.cudnn.enabled,
            )
        if x.shape[0] == 1:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
        return super().forward(x)


class MLP(nn.Sequential):
    """Linear + BatchNorm + ReLU per hidden layer, then a linear output (see :func:`_mlp`).

    The layers are applied without a module call each (``F.linear``, ``torch.relu``, the batch norm's
    ``forward``): the same computation as ``nn.Sequential``, at a fraction of its overhead for these
    small layers (hooks registered on the layers themselves are therefore not called).
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self._modules.values():
            if isinstance(layer, nn.Linear):
                x = F.linear(x, layer.weight, layer.bias)
            elif isinstance(layer, nn.ReLU):
                x = torch.relu(x)
            else:
                x = layer.forward(x)
        return x


def _mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, zero_last: bool = False, norm: str = "batch") -> MLP:
    """Linear + norm (batch or layer, see ``HIDDEN_NORMS``) + ReLU per hidden layer, then a linear output
    (zero-initialised if asked)."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), BatchNorm1d(width) if norm == "batch" else nn.LayerNorm(width), nn.ReLU()]
        in_dim = width
    last = nn.Linear(in_dim, out_dim)
    if zero_last:
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
    layers.append(last)
    return MLP(*layers)


def _normalize_latent(x: torch.Tensor) -> torch.Tensor:
    """Min-max scale each sample's latent to [0, 1] (EfficientZero's hidden-state normalisation)."""
    flat = x.flatten(1)
    low = flat.min(dim=1, keepdim=True).values
    scale = flat.max(dim=1, keepdim=True).values - low
    scale = torch.where(scale < 1e-5, scale + 1e-5, scale)
    return ((flat - low) / scale).view_as(x)


def _norm_2d(channels: int, norm: str) -> nn.Module:
    """The norm of a conv map (see ``HIDDEN_NORMS``): batch norm, or group norm with one group (a layer norm
    over each sample's channels and positions)."""
    return nn.BatchNorm2d(channels) if norm == "batch" else nn.GroupNorm(1, channels)


class ResidualBlock(nn.Module):
    """Two 3x3 convs, each followed by a norm (``"batch"`` or ``"layer"``), and a skip connection; optionally
    changes width and stride."""

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1, norm: str = "batch") -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)
        self.bn1 = _norm_2d(out_channels, norm)
        self.conv2 = nn.Conv2d(out_channels, out_channels, 3, padding=1, bias=False)
        self.bn2 = _norm_2d(out_channels, norm)
        self.skip: nn.Module = nn.Identity()
        if stride != 1 or in_channels != out_channels:
            self.skip = nn.Conv2d(in_channels, out_channels, 3, stride=stride, padding=1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.skip(x))


class DownSample(nn.Module):
    """EfficientZero's stem: divides height and width by 16 (96x96 -> 6x6)."""

    def __init__(self, in_channels: int, out_channels: int, norm: str = "batch") -> None:
        super().__init__()
        half = out_channels // 2
        self.conv = nn.Conv2d(in_channels, half, 3, stride=2, padding=1, bias=False)
        self.bn = _norm_2d(half, norm)
        self.blocks = nn.Sequential(
            ResidualBlock(half, half, norm=norm),
            ResidualBlock(half, out_channels, stride=2, norm=norm),
            ResidualBlock(out_channels, out_channels, norm=norm),
            nn.AvgPool2d(3, stride=2, padding=1),
            ResidualBlock(out_channels, out_channels, norm=norm),
            nn.AvgPool2d(3, stride=2, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(F.relu(self.bn(self.conv(x))))


VALUE_PREFIX_NORMS = ("batch", "layer")
"""How the value-prefix LSTM's output is normalised before its head.

``"batch"``: batch norm, EfficientZero's. In training every unroll step is normalised with the statistics
of its own step, but the search uses running statistics that mix the steps, over which the LSTM's output
grows. ``"layer"``: layer norm, the same in training and in the search (an option, not the paper's; the
measurements are in :class:`~delayzoo.agents.delayed_ez.DelayedEZ`'s docstring).
"""


HIDDEN_NORMS = ("batch", "layer")
"""How the networks normalise their hidden layers: the MLP family's representation, dynamics and heads; the conv
family's stem, residual blocks, dynamics, 1x1 reductions and heads (the SimSiam projection keeps batch norm in
both: only training reads it).

``"batch"``: batch norm, as EfficientZero's nets. Training normalises each call's batch with its own
statistics: the roots' latents apart from the latents of each unroll step, which the dynamics make differ;
the search and the acting use running statistics that mix them, so the network that acts is not the one
that was fitted. On CartPole-v1 (seed 100, 4k-10k steps, the entry and a Gumbel run with reanalysis ratio 1)
the prior's greedy action agreed with a 500-scoring heuristic's on 21-47% of replayed states in eval mode
and on 48-74% in training mode, the same weights. ``"layer"``: layer norm on vectors and group norm with one
group on conv maps, each sample normalised on its own, the same in training and in the search (an option,
not the paper's).
"""


class ConvNetworkConfig(NamedTuple):
    """Sizes of the conv family; the defaults are EfficientZero's Atari sizes.

    :param num_channels: width of the latent maps
    :param num_blocks: residual blocks in representation, dynamics and prediction
    :param downsample: use the /16 stem; ``None`` = when the frame is at least 64 pixels high
    :param reduced_channels: 1x1-conv width before the value, value-prefix and policy heads
    :param head_hidden: hidden widths of the value, value-prefix and policy MLPs
    :param lstm_hidden_size: width of the value-prefix LSTM
    :param proj_hidden: SimSiam projection hidden width
    :param proj_out: SimSiam projection output width
    :param pred_hidden: SimSiam prediction-head hidden width
    :param support_size: value and value-prefix bins are ``-support_size..support_size``
    :param state_norm: min-max normalise the latents (EfficientZero's Atari model: off)
    :param value_prefix_norm: ``"batch"`` (EfficientZero's) or ``"layer"`` norm on the value-prefix LSTM's output
        (see ``VALUE_PREFIX_NORMS`` in this module for why)
    :param hidden_norm: ``"batch"`` (EfficientZero's) or ``"layer"`` norm in the stem, the residual blocks, the
        dynamics, the 1x1 reductions and the heads' MLPs (see ``HIDDEN_NORMS`` in this module for why)
    """

    num_channels: int = 64
    num_blocks: int = 1
    downsample: bool | None = None
    reduced_channels: int = 16
    head_hidden: tuple[int, ...] = (32,)
    lstm_hidden_size: int = 512
    proj_hidden: int = 1024
    proj_out: int = 1024
    pred_hidden: int = 512
    support_size: int = 300
    state_norm: bool = False
    value_prefix_norm: str = "batch"
    hidden_norm: str = "batch"


class MlpNetworkConfig(NamedTuple):
    """Sizes of the vector family (EfficientZero has no vector net; these are our choice).

    :param latent_dim: size of the latent vector
    :param hidden: hidden widths of the representation and dynamics MLPs
    :param head_hidden: hidden widths of the value, value-prefix and policy MLPs
    :param lstm_hidden_size: width of the value-prefix LSTM
    :param proj_hidden: SimSiam projection hidden width
    :param proj_out: SimSiam projection output width
    :param pred_hidden: SimSiam prediction-head hidden width
    :param support_size: value and value-prefix bins are ``-support_size..support_size``
    :param state_norm: min-max normalise the latents (on: bounds the residual MLP dynamics)
    :param value_prefix_norm: ``"batch"`` (EfficientZero's) or ``"layer"`` norm on the value-prefix LSTM's output
        (see ``VALUE_PREFIX_NORMS`` in this module for why)
    :param hidden_norm: ``"batch"`` (as EfficientZero's nets) or ``"layer"`` norm in the hidden layers (see
        ``HIDDEN_NORMS`` in this module for why)
    """

    latent_dim: int = 128
    hidden: tuple[int, ...] = (256, 256)
    head_hidden: tuple[int, ...] = (64,)
    lstm_hidden_size: int = 128
    proj_hidden: int = 256
    proj_out: int = 256
    pred_hidden: int = 128
    support_size: int = 300
    state_norm: bool = True
    value_prefix_norm: str = "batch"
    hidden_norm: str = "batch"


class EfficientZeroNetwork(nn.Module):
    """Representation h, dynamics g (with value-prefix LSTM), prediction f and SimSiam heads.

    :param observation_shape: ``(C, H, W)`` for images, ``(n,)`` for vectors (other shapes are flattened)
    :param num_actions: size of the discrete action space
    :param image: use the conv family (else the MLP family)
    :param config: a :class:`ConvNetworkConfig` or :class:`MlpNetworkConfig` (defaults: paper sizes)
    :param obs_scale: observations are multiplied by this (1/255 for uint8 frames)
    """

    def __init__(
        self,
        observation_shape: tuple[int, ...],
        num_actions: int,
        image: bool,
        config: ConvNetworkConfig | MlpNetworkConfig | None = None,
        obs_scale: float = 1.0,
    ) -> None:
        super().__init__()
        if num_actions < 1:
            raise ValueError(f"num_actions must be >= 1, got {num_actions}")
        if image and len(observation_shape) != 3:
            raise ValueError(f"image observations must be (C, H, W), got shape {observation_shape}")
        if config is None:
            config = ConvNetworkConfig() if image else MlpNetworkConfig()
        if image != isinstance(config, ConvNetworkConfig):
            raise TypeError(f"config {type(config).__name__} does not match image={image}")
        self.observation_shape = tuple(observation_shape)
        self.num_actions = num_actions
        self.image = image
        self.config = config
        self.obs_scale = obs_scale
        self.register_buffer("support", integer_support(config.support_size), persistent=False)
        bins = 2 * config.support_size + 1
        if config.hidden_norm not in HIDDEN_NORMS:
            raise ValueError(f"hidden_norm must be one of {HIDDEN_NORMS}, got {config.hidden_norm!r}")
        if isinstance(config, ConvNetworkConfig):
            self._build_conv(config, bins)
        else:
            self._build_mlp(config, bins)
        self.projection = MLP(
            nn.Linear(self.latent_size, config.proj_hidden),
            BatchNorm1d(config.proj_hidden),
            nn.ReLU(),
            nn.Linear(config.proj_hidden, config.proj_hidden),
            BatchNorm1d(config.proj_hidden),
            nn.ReLU(),
            nn.Linear(config.proj_hidden, config.proj_out),
            BatchNorm1d(config.proj_out),
        )
        self.projection_head = MLP(
            nn.Linear(config.proj_out, config.pred_hidden),
            BatchNorm1d(config.pred_hidden),
            nn.ReLU(),
            nn.Linear(config.pred_hidden, config.proj_out),
        )

    # ----------------------------------------------------------------- construction
    def _build_conv(self, config: ConvNetworkConfig, bins: int) -> None:
        in_channels, height, _ = self.observation_shape
        channels, norm = config.num_channels, config.hidden_norm
        downsample = height >= 64 if config.downsample is None else config.downsample
        stem: list[nn.Module]
        if downsample:
            stem = [DownSample(in_channels, channels, norm)]
        else:
            stem = [nn.Conv2d(in_channels, channels, 3, padding=1, bias=False), _norm_2d(channels, norm), nn.ReLU()]
        self.representation = nn.Sequential(*stem, *self._blocks(config))
        with torch.no_grad():
            self.representation.eval()
            latent = self.representation(torch.zeros(1, *self.observation_shape))
            self.representation.train()
        self.latent_shape: tuple[int, ...] = tuple(latent.shape[1:])
        spatial = self.latent_shape[1] * self.latent_shape[2]
        self.latent_size = channels * spatial
        reduced = config.reduced_channels * spatial
        # dynamics: state + action plane -> next state (residual), then the value-prefix head
        self.dyn_conv = nn.Conv2d(channels + 1, channels, 3, padding=1, bias=False)
        self.dyn_bn = _norm_2d(channels, norm)
        self.dyn_blocks = self._blocks(config)
        self.reward_reduce = self._reduction(config)
        self.lstm = nn.LSTM(reduced, config.lstm_hidden_size)
        self._build_value_prefix_norm(config)
        self.value_prefix_head = _mlp(config.lstm_hidden_size, config.head_hidden, bins, zero_last=True, norm=norm)
        # prediction
        self.pred_blocks = self._blocks(config)
        self.value_reduce = self._reduction(config)
        self.policy_reduce = self._reduction(config)
        self.value_head = _mlp(reduced, config.head_hidden, bins, zero_last=True, norm=norm)
        self.policy_head = _mlp(reduced, config.head_hidden, self.num_actions, zero_last=True, norm=norm)

    @staticmethod
    def _blocks(config: ConvNetworkConfig) -> nn.Sequential:
        """``num_blocks`` residual blocks at the latent width."""
        width, norm = config.num_channels, config.hidden_norm
        return nn.Sequential(*[ResidualBlock(width, width, norm=norm) for _ in range(config.num_blocks)])

    @staticmethod
    def _reduction(config: ConvNetworkConfig) -> nn.Sequential:
        """A head's 1x1 conv to ``reduced_channels``, its norm and ReLU."""
        width, norm = config.reduced_channels, config.hidden_norm
        return nn.Sequential(nn.Conv2d(config.num_channels, width, 1), _norm_2d(width, norm), nn.ReLU())

    def _build_mlp(self, config: MlpNetworkConfig, bins: int) -> None:
        obs_dim = 1
        for size in self.observation_shape:
            obs_dim *= size
        latent = config.latent_dim
        self.latent_shape = (latent,)
        self.latent_size = latent
        norm = config.hidden_norm
        self.representation = nn.Sequential(nn.Flatten(), _mlp(obs_dim, config.hidden, latent, norm=norm))
        self.dyn_mlp = _mlp(latent + self.num_actions, config.hidden, latent, norm=norm)
        self.dyn_norm = nn.LayerNorm(latent)
        self.lstm = nn.LSTM(latent, config.lstm_hidden_size)
        self._build_value_prefix_norm(config)
        self.value_prefix_head = _mlp(config.lstm_hidden_size, config.head_hidden, bins, zero_last=True, norm=norm)
        self.value_head = _mlp(latent, config.head_hidden, bins, zero_last=True, norm=norm)
        self.policy_head = _mlp(latent, config.head_hidden, self.num_actions, zero_last=True, norm=norm)

    def _build_value_prefix_norm(self, config: ConvNetworkConfig | MlpNetworkConfig) -> None:
        if config.value_prefix_norm not in VALUE_PREFIX_NORMS:
            raise ValueError(
                f"value_prefix_norm must be one of {VALUE_PREFIX_NORMS}, got {config.value_prefix_norm!r}"
            )
        if config.value_prefix_norm == "batch":
            self.value_prefix_bn = BatchNorm1d(config.lstm_hidden_size)
        else:
            self.value_prefix_ln = nn.LayerNorm(config.lstm_hidden_size)

    # ----------------------------------------------------------------- the three functions
    def _normalize(self, latent: torch.Tensor) -> torch.Tensor:
        return _normalize_latent(latent) if self.config.state_norm else latent

    def represent(self, obs: torch.Tensor) -> torch.Tensor:
        """h: observations ``(B, *observation_shape)`` -> normalised latents ``(B, *latent_shape)``."""
        return self._normalize(self.representation(obs.float() * self.obs_scale))

    def transition(self, latent: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The latent part of g: ``(latent, action) -> next_latent`` (no value prefix)."""
        action = action.long()
        if self.image:
            plane = (action.float() / self.num_actions).view(-1, 1, 1, 1).expand(-1, 1, *latent.shape[2:])
            x = self.dyn_bn(self.dyn_conv(torch.cat([latent, plane], dim=1)))
            return self._normalize(self.dyn_blocks(F.relu(x + latent)))
        one_hot = F.one_hot(action, self.num_actions).to(latent.dtype)
        x = self.dyn_mlp(torch.cat([latent, one_hot], dim=1))
        norm = self.dyn_norm
        x = F.layer_norm(x + latent, norm.normalized_shape, norm.weight, norm.bias, norm.eps)
        return self._normalize(F.relu(x))

    def dynamics(
        self, latent: torch.Tensor, action: torch.Tensor, lstm_state: LSTMState
    ) -> tuple[torch.Tensor, LSTMState, torch.Tensor]:
        """g: ``(latent, action, lstm_state)`` -> ``(next_latent, next_lstm_state, value_prefix_logits)``.

        :param action: integer actions of shape ``(B,)``
        :param lstm_state: ``(h, c)``, each ``(1, B, lstm_hidden_size)``
        """
        next_latent = self.transition(latent, action)
        reward_features = self.reward_reduce(next_latent).flatten(1) if self.image else next_latent
        lstm = self.lstm  # one step of nn.LSTM, by the LSTM-cell kernel (a sequence kernel costs more for one step)
        next_h, next_c = torch.lstm_cell(
            reward_features, (lstm_state[0][0], lstm_state[1][0]),
            lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, lstm.bias_hh_l0,
        )
        norm = self.value_prefix_bn if self.config.value_prefix_norm == "batch" else self.value_prefix_ln
        value_prefix_logits = self.value_prefix_head(F.relu(norm(next_h)))
        return next_latent, (next_h.unsqueeze(0), next_c.unsqueeze(0)), value_prefix_logits

    def prediction(self, latent: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """f: latent -> ``(value_logits, policy_logits)``."""
        if self.image:
            x = self.pred_blocks(latent)
            return self.value_head(self.value_reduce(x).flatten(1)), self.policy_head(self.policy_reduce(x).flatten(1))
        return self.value_head(latent), self.policy_head(latent)

    def initial_inference(self, obs: torch.Tensor) -> InitialOutput:
        """Encode observations and predict value and policy at the encoded latents."""
        latent = self.represent(obs)
        value_logits, policy_logits = self.prediction(latent)
        return InitialOutput(latent, value_logits, policy_logits)

    def recurrent_inference(self, latent: torch.Tensor, lstm_state: LSTMState, action: torch.Tensor) -> RecurrentOutput:
        """One dynamics step followed by the prediction at the new latent."""
        next_latent, next_state, value_prefix_logits = self.dynamics(latent, action, lstm_state)
        value_logits, policy_logits = self.prediction(next_latent)
        return RecurrentOutput(next_latent, next_state, value_prefix_logits, value_logits, policy_logits)

    def initial_lstm_state(self, batch_size: int) -> LSTMState:
        """Zero LSTM state ``(h, c)`` for a batch (the state at a search root or after a reset)."""
        shape = (1, batch_size, self.config.lstm_hidden_size)
        ref = self.support
        return torch.zeros(shape, device=ref.device), torch.zeros(shape, device=ref.device)

    def project(self, latent: torch.Tensor, with_grad: bool = True) -> torch.Tensor:
        """SimSiam: projection, followed by the prediction head on the online branch (``with_grad``)."""
        proj = self.projection(latent.flatten(1))
        return self.projection_head(proj) if with_grad else proj.detach()

    # ----------------------------------------------------------------- supports
    def to_scalar(self, logits: torch.Tensor) -> torch.Tensor:
        """Scalar (value or value prefix) from categorical logits: ``h^-1(E[bin])``, in float32 (also under
        autocast: bfloat16 would keep the expectation to about 0.4%, which ``h^-1``, nearly quadratic, doubles)."""
        return h_inverse(expectation(logits.float(), self.support))


def build_network(
    observation_shape: tuple[int, ...],
    num_actions: int,
    image: bool,
    obs_scale: float = 1.0,
    **config_kwargs,
) -> EfficientZeroNetwork:
    """Build a network with the paper sizes, overridden by ``config_kwargs`` (e.g. tiny sizes for tests).

    :param config_kwargs: fields of :class:`ConvNetworkConfig` (images) or :class:`MlpNetworkConfig` (vectors)
    """
    config_class = ConvNetworkConfig if image else MlpNetworkConfig
    unknown = set(config_kwargs) - set(config_class._fields)
    if unknown:
        raise ValueError(f"unknown network options {sorted(unknown)} for {config_class.__name__}")
    config_kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in config_kwargs.items()}
    return EfficientZeroNetwork(observation_shape, num_actions, image, config_class(**config_kwargs), obs_scale)
