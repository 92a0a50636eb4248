"""PWM's policy: the world model, the actor-critic and their optimisers in one SB3 ``BasePolicy``."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import PyTorchObs, Schedule

from delayzoo.agents.common.checks import check_finite_observation
from delayzoo.agents.common.pending import has_pending_view, read_pending_view
from delayzoo.agents.common.precision import autocast
from delayzoo.agents.common.scan import SCAN_METHODS
from delayzoo.agents.pwm.actor_critic import ActorCritic, ActorCriticConfig, action_size
from delayzoo.agents.pwm.compilation import UpdatePasses
from delayzoo.agents.pwm.forecast import forecast_state
from delayzoo.agents.pwm.world_model import ObservationLayout, RecurrentState, WorldModel, WorldModelConfig

STATE_KEYS = ("matrix", "last_input", "readout")
"""Order of the arrays in the ``state`` tuple of :meth:`PWMPolicy.predict` (the sequence model's state)."""

SHOWN_KEYS = ("shown_latent", "after_shown", "after_shown_count")
"""What a forecast-mode policy under an observation delay carries after :data:`STATE_KEYS` (see
:attr:`PWMPolicy.state_keys`): the latent of the shown observation, the encodings of the actions executed
after its step (``(B, max_obs_delay + 1, action_size)``) and how many of them there are."""

DELAY_MODES = ("forecast", "augmented", "oblivious")
"""How PWM treats execution delay (see :class:`~delayzoo.agents.pwm.pwm.PWM`)."""

_WRAP_HINT = (
    "wrap the env as PendingActionsObservation(ExecutionDelay(env, delay)) or "
    "PendingActionsObservation(ObservationDelay(env, delay)) "
    "(delayzoo.wrappers; with the zoo: --delay N or --obs-delay N, and --pending-view)"
)


def resolve_delay_mode(delay_mode: str | None, observation_space: spaces.Space) -> str:
    """``delay_mode`` checked against ``observation_space``; ``None`` is ``"forecast"`` when the
    observation has the pending view, else ``"oblivious"`` (plain PWM).

    :raise ValueError: for an unknown mode, or ``"forecast"`` without the pending view
    """
    if delay_mode is None:
        return "forecast" if has_pending_view(observation_space) else "oblivious"
    if delay_mode not in DELAY_MODES:
        raise ValueError(f"delay_mode must be one of {', '.join(map(repr, DELAY_MODES))} (or None), got {delay_mode!r}")
    if delay_mode == "forecast" and not has_pending_view(observation_space):
        raise ValueError(
            "delay_mode='forecast' needs the pending actions and the delay in the observation, "
            f"got {observation_space}; " + _WRAP_HINT
        )
    return delay_mode


def _config(cls, kwargs: dict[str, Any] | None, name: str):
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = set(kwargs or {}) - known
    if unknown:
        raise TypeError(f"Unknown {name} keys {sorted(unknown)}; accepted keys: {sorted(known)}")
    return cls(**(kwargs or {}))


def _adamw(module: torch.nn.Module, lr: float, eps: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW, fused where torch supports it for the parameters (4x faster steps on CPU, same update)."""
    try:
        return torch.optim.AdamW(module.parameters(), lr=lr, eps=eps, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(module.parameters(), lr=lr, eps=eps, weight_decay=weight_decay)


class PWMPolicy(BasePolicy):
    """World model + actor-critic acting with a recurrent state.

    :param observation_space: observation space (images channels-first, as SB3 wraps them).
    :param action_space: ``Discrete`` or bounded 1-D ``Box``.
    :param lr_schedule: learning-rate schedule of the world model.
    :param world_model_kwargs: fields of :class:`~delayzoo.agents.pwm.world_model.WorldModelConfig`
        (``stoch``, ``classes``, ``cnn_channels``, ``mlp_units``, ``seq_width``, ``seq_cells``,
        ``seq_divisor``, ``norm``, ...).
    :param actor_critic_kwargs: fields of :class:`~delayzoo.agents.pwm.actor_critic.ActorCriticConfig`.
    :param actor_lr: actor learning rate; ``critic_lr``: critic learning rate.
    :param world_model_grad_clip: gradient-norm clip of the world model (the reference: 100 on Atari,
        1000 on DMC); ``actor_critic_grad_clip``: of the actor and of the critic.
    :param weight_decay: AdamW weight decay of all three optimisers (0.01, torch's default, in the reference).
    :param mixed_precision: train under bfloat16 autocast (the matrix memories stay float32). About 2.5x
        faster convolutions on CPUs with native bf16 (AVX512-BF16 / AMX) and on recent GPUs; off by default
        because the reference trains in float32.
    :param scan_method: :func:`~delayzoo.agents.common.scan.linear_recurrence` method of the training
        windows and of the lambda-returns (``"auto"``: sequential on CPU, parallel on GPUs).
    :param delay_mode: ``"forecast"``, ``"augmented"`` or ``"oblivious"`` (see :class:`~delayzoo.agents.pwm.pwm.PWM`;
        ``None``: forecast with the pending view, else oblivious). With the pending view, forecast and
        oblivious models see only its ``"observation"``; augmented models see the whole ``Dict``.
    :param forecast_samples: forecast mode, deterministic acting: the action is the mode of the actor's
        policy averaged over this many sampled forecasts (for ``Box`` actions, the average of its means).
        The prior's per-categorical modes make an atypical state that the actor, trained on sampled
        imagination, reads badly (CartPole-v1 under delays of 5 steps: 42 with the modes, 314 with 16
        samples). ``0``: one forecast from the prior's modes (no sampling). Stochastic acting samples one
        forecast and one action, which is a sample of the same mixture.
    :param compile_update: run imagination and the actor-critic loss compiled with ``torch.compile``
        (:mod:`~delayzoo.agents.pwm.compilation`): the same losses and gradients up to float rounding,
        cheaper on small models; tens of seconds of compilation on the first update; plain, with a
        warning, where compilation is not available.
    """

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Schedule,
        world_model_kwargs: dict[str, Any] | None = None,
        actor_critic_kwargs: dict[str, Any] | None = None,
        actor_lr: float = 3e-5,
        critic_lr: float = 3e-5,
        world_model_grad_clip: float = 100.0,
        actor_critic_grad_clip: float = 100.0,
        weight_decay: float = 0.01,
        mixed_precision: bool = False,
        scan_method: str = "auto",
        delay_mode: str | None = None,
        forecast_samples: int = 16,
        compile_update: bool = False,
    ) -> None:
        super().__init__(observation_space, action_space, squash_output=False)
        if not isinstance(compile_update, bool):
            raise ValueError(f"compile_update must be True or False, got {compile_update!r}")
        if scan_method not in SCAN_METHODS:
            raise ValueError(f"Unknown scan_method {scan_method!r}: accepted values are {SCAN_METHODS}")
        if isinstance(forecast_samples, bool) or not isinstance(forecast_samples, int) or forecast_samples < 0:
            raise ValueError(f"forecast_samples must be an integer >= 0, got {forecast_samples!r}")
        self.forecast_samples = forecast_samples
        self.delay_mode = resolve_delay_mode(delay_mode, observation_space)
        self.pending_view = has_pending_view(observation_space)
        self.max_obs_delay = (
            int(observation_space.spaces["obs_delay"].n) - 1
            if self.pending_view and self.delay_mode == "forecast" and "obs_delay" in observation_space.spaces
            else None
        )
        self.model_observation_space = (
            observation_space.spaces["observation"]
            if self.pending_view and self.delay_mode != "augmented"
            else observation_space
        )
        self.world_model_kwargs, self.actor_critic_kwargs = world_model_kwargs, actor_critic_kwargs
        self.actor_lr, self.critic_lr = actor_lr, critic_lr
        self.world_model_grad_clip, self.actor_critic_grad_clip = world_model_grad_clip, actor_critic_grad_clip
        self.weight_decay, self.scan_method = weight_decay, scan_method
        self.mixed_precision = mixed_precision
        world_model_config = _config(WorldModelConfig, world_model_kwargs, "world_model_kwargs")
        layout = ObservationLayout(self.model_observation_space, frames=world_model_config.frames == "conv")
        self.world_model = WorldModel(layout, action_size(action_space), world_model_config, scan_method)
        self.actor_critic = ActorCritic(
            self.world_model.feature_size,
            action_space,
            _config(ActorCriticConfig, actor_critic_kwargs, "actor_critic_kwargs"),
        )
        adamw = lambda module, lr, eps: _adamw(module, lr, eps, weight_decay)  # noqa: E731
        self.world_model_optimizer = adamw(self.world_model, lr_schedule(1), 1e-8)
        self.actor_optimizer = adamw(self.actor_critic.actor, actor_lr, 1e-5)
        self.critic_optimizer = adamw(self.actor_critic.critic, critic_lr, 1e-5)
        self.compile_update = compile_update
        self.update_passes = UpdatePasses(self.actor_critic, compile_update)

    def _get_constructor_parameters(self) -> dict[str, Any]:
        data = super()._get_constructor_parameters()
        data.update(
            world_model_kwargs=self.world_model_kwargs,
            actor_critic_kwargs=self.actor_critic_kwargs,
            actor_lr=self.actor_lr,
            critic_lr=self.critic_lr,
            world_model_grad_clip=self.world_model_grad_clip,
            actor_critic_grad_clip=self.actor_critic_grad_clip,
            weight_decay=self.weight_decay,
            mixed_precision=self.mixed_precision,
            scan_method=self.scan_method,
            delay_mode=self.delay_mode,
            forecast_samples=self.forecast_samples,
            compile_update=self.compile_update,
        )
        return data

    def set_training_mode(self, mode: bool) -> None:
        """SB3's, skipped when every module already is in ``mode``: :meth:`predict` calls it at every env
        step, and walking the module tree with ``train`` cost about a sixth of a small model's acting."""
        if any(module.training != mode for module in self.modules()):
            super().set_training_mode(mode)

    def model_observation(self, obs: Any) -> Any:
        """The part of (a batch of) observations the world model reads: the env's own observation in
        forecast and oblivious modes, everything in augmented mode."""
        return obs["observation"] if self.model_observation_space is not self.observation_space else obs

    def autocast(self) -> torch.autocast:
        """The training passes' autocast context: bfloat16 with ``mixed_precision``, else a no-op."""
        return autocast(self.device, "bfloat16" if self.mixed_precision else False)

    def encode_action(self, action: torch.Tensor) -> torch.Tensor:
        """World-model input of stored actions: one-hot for ``Discrete``, the [-1, 1] vector for ``Box``."""
        if isinstance(self.action_space, spaces.Discrete):
            return torch.nn.functional.one_hot(action.long(), int(self.action_space.n)).float()
        return action.float()

    def encode_pending(self, actions: torch.Tensor) -> torch.Tensor:
        """World-model input of pending actions in env units ``(B, M, ...)`` (Box actions rescaled to [-1, 1])."""
        if isinstance(self.action_space, spaces.Discrete):
            return self.encode_action(actions)
        low = torch.as_tensor(self.action_space.low, device=actions.device, dtype=torch.float32)
        high = torch.as_tensor(self.action_space.high, device=actions.device, dtype=torch.float32)
        return 2.0 * (actions.float() - low) / (high - low) - 1.0

    @property
    def state_keys(self) -> tuple[str, ...]:
        """Order of the arrays in the ``state`` tuple of :meth:`predict`: :data:`STATE_KEYS`, and
        :data:`SHOWN_KEYS` after them in forecast mode under an observation delay."""
        return STATE_KEYS if self.max_obs_delay is None else STATE_KEYS + SHOWN_KEYS

    def initial_state(self, n_envs: int) -> RecurrentState:
        """The recurrent state of ``n_envs`` fresh episodes."""
        state = self.world_model.initial_state(n_envs, self.device)
        if self.max_obs_delay is not None:
            width = action_size(self.action_space)
            state["shown_latent"] = torch.zeros(n_envs, self.world_model.latent_size, device=self.device)
            state["after_shown"] = torch.zeros(n_envs, self.max_obs_delay + 1, width, device=self.device)
            state["after_shown_count"] = torch.zeros(n_envs, dtype=torch.long, device=self.device)
        return state

    def act(
        self, obs: PyTorchObs, state: RecurrentState, episode_start: torch.Tensor, deterministic: bool = False
    ) -> tuple[torch.Tensor, RecurrentState]:
        """Choose actions for a batch of observations and advance the recurrent state with the
        action executed now (forecast mode: pending action 0 when the delay is positive; the
        decision is taken from the state forecast through the env's pending actions).

        :param obs: observation tensors with a batch dimension.
        :param state: recurrent state before these observations.
        :param episode_start: ``(B,)`` booleans; the state restarts where true.
        :param deterministic: use the modes of the latent and of the policy.
        :return: raw actions (indices, or vectors in [-1, 1]) and the state after them.
        """
        keep = (~episode_start).float()
        state = {
            name: value * keep.view(-1, *([1] * (value.ndim - 1))).to(value.dtype) for name, value in state.items()
        }
        latent = self.world_model.sample_latent(
            self.world_model.encode(self.model_observation(obs), batch_dims=1), deterministic
        )
        if self.max_obs_delay is not None:
            return self._act_under_observation_delay(obs, latent, state, episode_start, deterministic)
        if self.delay_mode == "forecast":
            view = read_pending_view(obs, self.action_space)
            pending = self.encode_pending(view.actions)
            raw, executed = self._act_from_forecast(latent, state, pending, view.delays, deterministic)
            if pending.shape[1]:
                # The env executes pending action 0 now when the delay is positive, the decision at delay 0.
                executed = torch.where((view.delays > 0).unsqueeze(-1), pending[:, 0], executed)
        else:
            raw, executed = self.actor_critic.actor.sample(
                self.world_model.features(latent, state["readout"]), deterministic
            )
        _, state = self.world_model.step(latent, executed, state)
        if not self.actor_critic.actor.discrete:
            raw = raw.clamp(-1.0, 1.0)
        return raw, state

    def _act_under_observation_delay(
        self,
        obs: PyTorchObs,
        latent: torch.Tensor,
        state: RecurrentState,
        episode_start: torch.Tensor,
        deterministic: bool,
    ) -> tuple[torch.Tensor, RecurrentState]:
        """Forecast mode over an ``ObservationDelay``: the sequence model follows the env's own steps, and an
        observation shown again, or steps whose observations were never shown, must not be confused.

        The carried state is the one *before* the shown observation's step, with that observation's latent
        and the actions executed after it (:data:`SHOWN_KEYS`). A new step first moves it to the newly shown
        observation: ``advance = after_shown_count - obs_delay`` steps through the carried latent and then
        prior samples (0 when the same observation is shown again; more than 1 when steps arrived unseen).
        The decision is taken from the state forecast through the unobserved and the queued actions; the
        action executed at this step (the first queued one, or the decision) joins the carried actions."""
        view = read_pending_view(obs, self.action_space)
        count = state["after_shown_count"]
        advance = torch.where(episode_start.to(count.device), 0, count - view.obs_delays)
        if bool((advance < 0).any()):
            env = int(torch.nonzero(advance < 0)[0])
            raise ValueError(
                f"obs_delay {int(view.obs_delays[env])} of env {env} is more than one step past the previous step's "
                f"{int(count[env]) - 1}: the state does not belong to this env's previous step (pass the state "
                "predict returned, and episode_start at resets)"
            )
        sequence_state = {name: state[name] for name in STATE_KEYS}
        _, sequence_state = forecast_state(
            self.world_model, state["shown_latent"], sequence_state, state["after_shown"], advance
        )
        pending = self.encode_pending(view.actions)
        unseen = view.obs_delays + view.delays
        raw, decision = self._act_from_forecast(latent, sequence_state, pending, unseen, deterministic)
        # every action from the shown step on, then the decision: the one executed now is at position obs_delay
        executed = torch.cat([pending, torch.zeros_like(pending[:, :1])], dim=1)
        executed[torch.arange(len(unseen), device=unseen.device), unseen] = decision
        after_shown = executed[:, : self.max_obs_delay + 1]
        if not self.actor_critic.actor.discrete:
            raw = raw.clamp(-1.0, 1.0)
        return raw, {
            **sequence_state,
            "shown_latent": latent,
            "after_shown": after_shown,
            "after_shown_count": view.obs_delays + 1,
        }

    def _act_from_forecast(
        self,
        latent: torch.Tensor,
        state: RecurrentState,
        pending: torch.Tensor,
        delays: torch.Tensor,
        deterministic: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The actor's ``(raw, encoding)`` at the state forecast through the pending actions (see
        ``forecast_samples``)."""
        actor = self.actor_critic.actor
        samples = self.forecast_samples if deterministic else 1
        if samples <= 1 or not bool(delays.any()):  # nothing to sample: no env has a pending step
            ahead, ahead_state = forecast_state(
                self.world_model, latent, state, pending, delays, deterministic=deterministic and samples == 0
            )
            return actor.sample(self.world_model.features(ahead, ahead_state["readout"]), deterministic)
        repeat = lambda x: x.repeat_interleave(samples, dim=0)  # noqa: E731
        ahead, ahead_state = forecast_state(
            self.world_model,
            repeat(latent),
            {name: repeat(value) for name, value in state.items()},
            repeat(pending),
            repeat(delays),
        )
        dist = actor.distribution(self.world_model.features(ahead, ahead_state["readout"]))
        batch = latent.shape[0]
        if actor.discrete:
            raw = dist.probs.view(batch, samples, -1).mean(1).argmax(-1)
            return raw, torch.nn.functional.one_hot(raw, actor.size).float()
        raw = dist.mean.view(batch, samples, -1).mean(1)
        return raw, raw.clamp(-1.0, 1.0)

    def obs_to_tensor(self, observation: np.ndarray | dict[str, np.ndarray]) -> tuple[PyTorchObs, bool]:
        """SB3's conversion, after refusing a non-finite observation by its entry (:func:`check_finite_observation`)."""
        check_finite_observation(observation)
        return super().obs_to_tensor(observation)

    def _predict(self, observation: PyTorchObs, deterministic: bool = False) -> torch.Tensor:
        batch = len(next(iter(observation.values()))) if isinstance(observation, dict) else len(observation)
        starts = torch.ones(batch, dtype=torch.bool, device=self.device)
        return self.act(observation, self.initial_state(batch), starts, deterministic)[0]

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        """Actions for (a batch of) observations, carrying the recurrent state like SB3's recurrent policies.

        :param observation: one observation or a batch from a VecEnv.
        :param state: the state returned by the previous call (arrays in :attr:`state_keys` order),
            or ``None`` at the start of every episode.
        :param episode_start: booleans per env; the state restarts where true (all true if ``state`` is ``None``).
        :param deterministic: act greedily.
        :return: the actions (within the action space) and the next state.
        """
        self.set_training_mode(False)
        obs_tensor, vectorized = self.obs_to_tensor(observation)
        batch = len(next(iter(obs_tensor.values()))) if isinstance(obs_tensor, dict) else len(obs_tensor)
        if state is None:
            current = self.initial_state(batch)
            starts = np.ones(batch, dtype=bool)
        else:
            keys = self.state_keys
            if len(state) != len(keys) or len(state[0]) != batch:
                raise ValueError(f"state must be the {len(keys)} arrays returned by predict for {batch} envs")
            current = {name: torch.as_tensor(value, device=self.device) for name, value in zip(keys, state)}
            starts = np.zeros(batch, dtype=bool) if episode_start is None else np.asarray(episode_start, dtype=bool)
        with torch.no_grad():
            raw, current = self.act(
                obs_tensor, current, torch.as_tensor(starts.reshape(batch), device=self.device), deterministic
            )
        actions = raw.cpu().numpy()
        if isinstance(self.action_space, spaces.Box):
            actions = self.unscale_action(actions.reshape((-1, *self.action_space.shape)))
            actions = np.clip(actions, self.action_space.low, self.action_space.high)
        if not vectorized:
            actions = actions.squeeze(axis=0)
        return actions, tuple(current[name].cpu().numpy() for name in self.state_keys)
