"""DelayedEZ policies: the EfficientZero networks plus the delay-aware batched search.

``CnnPolicy`` takes image observations, ``MlpPolicy`` vectors, ``MultiInputPolicy`` the ``Dict``
of :class:`~delayzoo.wrappers.PendingActionsObservation` (``"observation"``, ``"pending_actions"``,
``"delay"``), whose ``"observation"`` may be an image or a vector.

Acting: encode the observation, roll the dynamics through ``pending_actions[:delay]`` (each env
its own delay, batched), and search from that forecast root with a fresh value-prefix LSTM. With
``forward_model=False`` the search starts at the encoded observation (the delay-oblivious baseline).
"""

from __future__ import annotations

import copy
import inspect
from typing import Any, NamedTuple

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule

from delayzoo.agents.common.checks import check_finite_observation
from delayzoo.agents.common.pending import has_pending_view, read_pending_view
from delayzoo.agents.common.precision import autocast, check_mixed_precision
from delayzoo.agents.delayed_ez.config import SearchConfig
from delayzoo.agents.delayed_ez.mcts import MCTS, forecast_latents
from delayzoo.agents.delayed_ez.networks import EfficientZeroNetwork, build_network

__all__ = ["ActOutput", "CnnPolicy", "DelayedEZPolicy", "MlpPolicy", "MultiInputPolicy"]


class ActOutput(NamedTuple):
    """A batched decision: actions ``(B,)``, root visits ``(B, A)``, root values ``(B,)``, the number of steps
    each search root lies ahead of the observation ``(B,)``, and the weights of the policy targets ``(B, A)``
    (:attr:`~delayzoo.agents.delayed_ez.mcts.SearchOutput.policy`)."""

    actions: np.ndarray
    visits: np.ndarray
    root_values: np.ndarray
    root_offsets: np.ndarray
    policy: np.ndarray


def _observation_space(space: spaces.Space) -> spaces.Box:
    if isinstance(space, spaces.Dict):
        if "observation" not in space.spaces:
            raise ValueError(
                "a Dict observation needs an 'observation' key (as PendingActionsObservation gives), "
                f"got keys {list(space.spaces)}"
            )
        space = space.spaces["observation"]
    if not isinstance(space, spaces.Box):
        raise TypeError(f"DelayedEZ needs Box observations (image or vector), got {space}")
    return space


def _set_mode(network: torch.nn.Module, training: bool) -> None:
    """``network.train(training)``, skipped when the network is in that mode already (the walk over every
    submodule costs about as much as a small forward pass, and the mode changes several times per env step)."""
    if network.training != training:
        network.train(training)


class DelayedEZPolicy(BasePolicy):
    """EfficientZero networks (online and target) and the search used to act.

    :param observation_space: image ``Box (C, H, W)``, vector ``Box``, or the Dict of ``PendingActionsObservation``
    :param action_space: ``Discrete``
    :param lr_schedule: learning-rate schedule (for the optimizer's initial rate)
    :param net_kwargs: network sizes, fields of ``ConvNetworkConfig`` / ``MlpNetworkConfig`` (defaults: paper sizes)
    :param search_config: the search hyperparameters (default: EfficientZero's)
    :param forward_model: roll the dynamics through the pending actions before searching
    :param normalize_images: divide uint8 images by 255
    :param optimizer_class: the optimizer (EfficientZero: SGD)
    :param optimizer_kwargs: its keywords (default for SGD: momentum 0.9, weight decay 1e-4); an optimizer
        that takes ``foreach`` gets ``foreach=True`` unless ``foreach`` or ``fused`` is given
    :param seed: seed of the search's random generator (noise, tie-breaks, sampled actions)
    :param mixed_precision: autocast of the updates, the acting searches and the reanalysis (the reference's
        ``--amp_type torch_amp``): ``True`` is bfloat16 on a CPU and float16 with a gradient scaler on a GPU,
        ``"bfloat16"`` bfloat16 everywhere, ``False`` (default) float32 (see
        :mod:`~delayzoo.agents.common.precision`). The parameters, losses, value transforms and everything
        handed to the tree stay float32
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        net_kwargs: dict[str, Any] | None = None,
        search_config: SearchConfig | None = None,
        forward_model: bool = True,
        normalize_images: bool = True,
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.SGD,
        optimizer_kwargs: dict[str, Any] | None = None,
        seed: int | None = None,
        mixed_precision: bool | str = False,
    ) -> None:
        self.mixed_precision = check_mixed_precision(mixed_precision)
        if optimizer_kwargs is None:
            optimizer_kwargs = {"momentum": 0.9, "weight_decay": 1e-4} if optimizer_class is torch.optim.SGD else {}
        super().__init__(
            observation_space,
            action_space,
            normalize_images=normalize_images,
            optimizer_class=optimizer_class,
            optimizer_kwargs=optimizer_kwargs,
        )
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(f"DelayedEZ needs a Discrete action space, got {action_space}")
        self._check_observation_space(observation_space)
        inner = _observation_space(observation_space)
        self.image = len(inner.shape) == 3
        scale = 1.0 / 255.0 if (self.image and normalize_images and inner.dtype == np.uint8) else 1.0
        self.net_kwargs = dict(net_kwargs or {})
        self.search_config = SearchConfig() if search_config is None else search_config
        self.forward_model = forward_model
        self.seed = seed
        self.num_actions = int(action_space.n)
        self.network: EfficientZeroNetwork = build_network(
            tuple(inner.shape), self.num_actions, self.image, scale, **self.net_kwargs
        )
        self.target_network: EfficientZeroNetwork = copy.deepcopy(self.network)
        self.target_network.requires_grad_(False)
        self.target_network.eval()
        self.mcts = MCTS(self.num_actions, self.search_config)
        self.search_rng = np.random.default_rng(seed)
        options = dict(self.optimizer_kwargs)
        if "foreach" in inspect.signature(self.optimizer_class).parameters and not {"foreach", "fused"} & set(options):
            options["foreach"] = True  # torch's default on a CPU is the per-parameter loop: same update, slower
        self.optimizer = self.optimizer_class(self.network.parameters(), lr=lr_schedule(1), **options)

    def _check_observation_space(self, observation_space: spaces.Space) -> None:
        """Subclasses restrict which observation spaces they accept."""
        _observation_space(observation_space)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            net_kwargs=self.net_kwargs,
            search_config=self.search_config,
            forward_model=self.forward_model,
            seed=self.seed,
            mixed_precision=self.mixed_precision,
        )
        return data

    def set_training_mode(self, mode: bool) -> None:
        """Train or eval mode for the online network; the target network always stays in eval mode."""
        _set_mode(self.network, mode)
        _set_mode(self.target_network, False)
        self.training = mode

    def reseed(self, seed: int | None) -> None:
        """Restart the search's random generator (Dirichlet noise, tie-breaks, sampled actions)."""
        self.seed = seed
        self.search_rng = np.random.default_rng(seed)

    def autocast(self) -> torch.autocast:
        """The autocast context of ``mixed_precision`` on the policy's device (a no-op when it is off), without
        the weight cache: the prefetch thread's reanalysis under autocast would make the updates depend on
        timing (see :func:`~delayzoo.agents.common.precision.autocast`)."""
        return autocast(self.device, self.mixed_precision, cache_enabled=False)

    def refresh_target(self) -> None:
        """Copy the online network's weights into the target network."""
        self.target_network.load_state_dict(self.network.state_dict())

    # ----------------------------------------------------------------- acting
    def split_observation(self, obs: PyTorchObs) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """``(observation, pending_actions, delay)`` from a batched observation (the last two ``None`` without
        the pending view); a pending action outside the action space raises a ``ValueError``."""
        if isinstance(obs, dict):
            if has_pending_view(self.observation_space):
                view = read_pending_view(obs, self.action_space)
                return view.observation, view.actions, view.delays
            return obs["observation"], None, None
        return obs, None, None

    @torch.inference_mode()
    def act(
        self,
        obs: PyTorchObs,
        deterministic: bool,
        add_noise: bool = False,
        temperature: float = 1.0,
        rng: np.random.Generator | None = None,
    ) -> ActOutput:
        """One batched search for a batch of observations (one per env), then pick the actions.

        pUCT: ``deterministic`` takes the argmax of the visit counts (ties: lowest action), else actions are
        sampled from ``visits^(1/temperature)``. Gumbel: the search selects the action, with Gumbel noise unless
        ``deterministic`` (sampling without replacement is the Gumbel search's exploration).

        :param obs: batched observations (tensors on the policy's device)
        :param deterministic: the search's best action, no sampling
        :param add_noise: pUCT's Dirichlet noise at the roots (training)
        :param temperature: pUCT's visit-count temperature for sampled actions
        :param rng: random generator (defaults to the policy's seeded search generator)
        """
        rng = self.search_rng if rng is None else rng
        was_training = self.network.training
        _set_mode(self.network, False)
        try:
            with self.autocast():
                observation, pending, delay = self.split_observation(obs)
                root = self.network.initial_inference(observation)
                latent, value_logits, logits = root.latent, root.value_logits, root.policy_logits
                offsets = torch.zeros(latent.shape[0], dtype=torch.long)
                if self.forward_model and pending is not None and delay is not None and int(delay.max()) > 0:
                    latent = forecast_latents(self.network.transition, latent, pending, delay)
                    value_logits, logits = self.network.prediction(latent)
                    offsets = delay.long().cpu()
                gumbel = self.search_config.gumbel
                result = self.mcts.search(
                    self.network, latent, logits, rng, add_noise or (gumbel and not deterministic),
                    root_value_logits=value_logits,
                )
        finally:
            _set_mode(self.network, was_training)
        visits = result.visits
        if gumbel or deterministic:
            actions = result.actions
        else:
            weights = visits.astype(np.float64) ** (1.0 / temperature)
            probs = weights / weights.sum(axis=1, keepdims=True)
            actions = np.array([rng.choice(self.num_actions, p=p) for p in probs])
        return ActOutput(actions.astype(np.int64), visits, result.root_values, offsets.numpy(), result.policy)

    def obs_to_tensor(self, observation: np.ndarray | dict[str, np.ndarray]) -> tuple[PyTorchObs, bool]:
        """SB3's conversion, after refusing a non-finite observation by its entry (:func:`check_finite_observation`)."""
        check_finite_observation(observation)
        return super().obs_to_tensor(observation)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        return torch.as_tensor(self.act(observation, deterministic).actions, device=self.device)

    def forward(self, obs: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        """Actions for a batch of observations (same as :meth:`_predict`)."""
        return self._predict(obs, deterministic)


class CnnPolicy(DelayedEZPolicy):
    """DelayedEZ policy for image observations ``(C, H, W)``."""

    def _check_observation_space(self, observation_space: spaces.Space) -> None:
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) != 3:
            raise ValueError(f"CnnPolicy needs image observations (a 3-D Box), got {observation_space}")


class MlpPolicy(DelayedEZPolicy):
    """DelayedEZ policy for vector observations."""

    def _check_observation_space(self, observation_space: spaces.Space) -> None:
        if not isinstance(observation_space, spaces.Box) or len(observation_space.shape) == 3:
            raise ValueError(
                f"MlpPolicy needs vector observations, got {observation_space}; use CnnPolicy for images"
            )


class MultiInputPolicy(DelayedEZPolicy):
    """DelayedEZ policy for the ``Dict`` observation of ``PendingActionsObservation`` (image or vector inside)."""

    def _check_observation_space(self, observation_space: spaces.Space) -> None:
        if not isinstance(observation_space, spaces.Dict):
            raise ValueError(
                "MultiInputPolicy needs a Dict observation such as PendingActionsObservation's, "
                f"got {observation_space}"
            )
        _observation_space(observation_space)
