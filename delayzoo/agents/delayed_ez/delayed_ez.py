"""DelayedEZ: EfficientZero under stochastic execution delay, with the Stable-Baselines3 API.

One training iteration, top to bottom (:meth:`DelayedEZ.learn`):

1. one batched search for all envs (from the forecast roots under delay) picks the actions;
2. the envs step; each env's :class:`~delayzoo.agents.delayed_ez.replay.GameWriter` stores the
   *executed* action and pairs the search policy with the observation it was rooted at;
3. every ``train_freq`` steps, ``gradient_steps`` updates (:meth:`DelayedEZ.train`): sample with
   priorities, bootstrap the n-step values with the target network, reanalyse a fraction of the
   policy targets by searching with the target network, unroll the model ``num_unroll_steps``
   steps, and minimise EfficientZero's weighted losses.

Optimiser: SGD with momentum 0.9, weight decay 1e-4, learning rate 0.2 with a linear warm-up over
the first ``lr_warmup_steps`` updates (EfficientZero's Atari choice). Adam can be chosen with
``policy_kwargs=dict(optimizer_class=torch.optim.Adam)`` (our CartPole settings do).
"""

from __future__ import annotations

import io
import pathlib
import sys
import time
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.utils import FloatSchedule, obs_as_tensor, safe_mean
from stable_baselines3.common.vec_env import VecEnv
from torch.nn import functional as F

from delayzoo.agents.common.checks import (
    check_finite_step,
    check_gradient_steps,
    check_learning_rate,
    check_number,
    warn_if_no_update,
)
from delayzoo.agents.common.plain_save import PlainSaveMixin
from delayzoo.agents.common.transforms import h_transform, two_hot
from delayzoo.agents.delayed_ez.policies import ActOutput, CnnPolicy, DelayedEZPolicy, MlpPolicy, MultiInputPolicy
from delayzoo.agents.delayed_ez.replay import GameWriter, PrioritizedGameBuffer, ReplayBatch
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation

__all__ = ["DelayedEZ"]

SelfDelayedEZ = TypeVar("SelfDelayedEZ", bound="DelayedEZ")

REANALYSIS_CHUNK = 512
"""Roots per reanalysis search (bounds the memory of the stored latents: chunk x simulations)."""


def random_shift(images: torch.Tensor, pad: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Shift each image (``(N, C, H, W)``) by up to ``pad`` pixels, with replicated borders (DrQ / EfficientZero)."""
    n, _, height, width = images.shape
    padded = F.pad(images.float(), (pad, pad, pad, pad), mode="replicate")
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device="cpu").to(images.device)
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator, device="cpu").to(images.device)
    rows = torch.arange(height, device=images.device).view(1, height, 1) + dy.view(n, 1, 1)
    cols = torch.arange(width, device=images.device).view(1, 1, width) + dx.view(n, 1, 1)
    batch = torch.arange(n, device=images.device).view(n, 1, 1)
    return padded.permute(0, 2, 3, 1)[batch, rows, cols].permute(0, 3, 1, 2)


def random_intensity(
    images: torch.Tensor, scale: float = 0.05, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Multiply each image by ``1 + scale * clip(N(0, 1), -2, 2)`` (EfficientZero's intensity augmentation)."""
    noise = torch.randn(images.shape[0], generator=generator, device="cpu").clamp(-2.0, 2.0).to(images.device)
    return images * (1.0 + scale * noise).view(-1, *([1] * (images.dim() - 1)))


def _categorical_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of ``logits`` against target probabilities (last dimension)."""
    return -(target * F.log_softmax(logits, dim=-1)).sum(-1)


def _check_hyperparameters(values: dict[str, Any]) -> None:
    """Range checks of the constructor's numeric arguments (``values``: its ``locals()``)."""
    check_learning_rate(values["learning_rate"])
    for name, low in (
        ("buffer_size", 1), ("learning_starts", 0), ("batch_size", 1), ("num_simulations", 1),
        ("num_unroll_steps", 1), ("td_steps", 1), ("train_freq", 1), ("target_update_interval", 1),
        ("lstm_horizon", 1), ("segment_length", 1), ("lr_warmup_steps", 0), ("stats_window_size", 1),
    ):
        check_number(name, values[name], low, integer=True)
    check_gradient_steps(values["gradient_steps"])
    check_number("auto_td_period", values["auto_td_period"], 1, integer=True, optional=True)
    for name in ("reanalyze_ratio", "gamma", "exploration_fraction", "priority_beta"):
        check_number(name, values[name], 0, 1)
    for name in ("pb_c_base", "dirichlet_alpha", "max_grad_norm"):
        check_number(name, values[name], 0, low_open=True)
    check_number("visit_temperature", values["visit_temperature"], 0, low_open=True, optional=True)
    for name in ("pb_c_init", "priority_alpha", "value_loss_coef", "reward_loss_coef", "policy_loss_coef",
                 "consistency_loss_coef"):
        check_number(name, values[name], 0)


def _check_replay_arrays(arrays: Any, observation_space: spaces.Space, action_space: spaces.Discrete) -> None:
    """Refuse a saved replay buffer whose counters or game shapes do not fit this model's spaces."""
    space = observation_space["observation"] if isinstance(observation_space, spaces.Dict) else observation_space

    def scalar(name: str, low: float) -> float:
        if name not in arrays or arrays[name].shape != () or arrays[name].dtype.kind not in "iuf":
            raise ValueError(f"replay buffer file does not fit this model: no number {name!r}")
        value = arrays[name].item()
        if not (np.isfinite(value) and value >= low):
            raise ValueError(f"replay buffer file does not fit this model: {name}={value!r} is not >= {low}")
        return value

    scalar("capacity", 1)
    stored = 0
    num_games = int(scalar("num_games", 0))
    for index in range(num_games):
        prefix = f"game{index}/"
        missing = [key for key in ("observations", "actions", "rewards", "policies", "has_policy", "terminated",
                                   "priorities", "start_id") if prefix + key not in arrays]
        if missing:
            raise ValueError(f"replay buffer file does not fit this model: game {index} has no {missing}")
        observations, actions = arrays[prefix + "observations"], arrays[prefix + "actions"]
        length = len(actions)
        expected = {
            "observations": (length + 1, *space.shape), "actions": (length,), "rewards": (length,),
            "policies": (length, int(action_space.n)), "has_policy": (length,), "priorities": (length,),
        }
        for key, shape in expected.items():
            if arrays[prefix + key].shape != shape:
                raise ValueError(
                    f"replay buffer file does not fit this model: game {index} {key} has shape "
                    f"{arrays[prefix + key].shape}, expected {shape} (observation space {space}, "
                    f"{int(action_space.n)} actions)"
                )
        if observations.dtype.kind not in "iuf" or actions.dtype.kind not in "iu":
            raise ValueError(f"replay buffer file does not fit this model: game {index} holds non-numeric arrays")
        if length and not (0 <= actions.min() and actions.max() < action_space.n):
            raise ValueError(f"replay buffer file does not fit this model: game {index} has actions outside {action_space}")
        stored += length
    if scalar("total_added", 0) < stored:
        raise ValueError(
            f"replay buffer file does not fit this model: total_added={arrays['total_added']} is below the "
            f"{stored} transitions it holds"
        )


class DelayedEZ(PlainSaveMixin, BaseAlgorithm):
    """EfficientZero with a forward model over the pending actions (Delayed-EZ, ICLR 2024).

    >>> import gymnasium as gym
    >>> from delayzoo.wrappers import ExecutionDelay, RandomWalkDelay, PendingActionsObservation
    >>> env = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(5)))
    >>> model = DelayedEZ("MultiInputPolicy", env).learn(30_000)  # doctest: +SKIP

    :param policy: "CnnPolicy", "MlpPolicy", "MultiInputPolicy" or a :class:`DelayedEZPolicy` subclass
    :param env: env or VecEnv (all envs act through one batched search); under delay it must
        expose the queue through ``PendingActionsObservation``
    :param learning_rate: learning rate (constant or schedule of the remaining progress)
    :param buffer_size: transitions kept in the replay
    :param learning_starts: env steps before the first update
    :param batch_size: samples per update
    :param num_simulations: MCTS simulations per decision
    :param num_unroll_steps: model unroll steps per sample (K)
    :param td_steps: n of the n-step value targets
    :param reanalyze_ratio: fraction of each batch whose policy targets are recomputed by a search with
        the target network
    :param forward_model: roll the dynamics through the pending actions before searching (False: the
        delay-oblivious baseline)
    :param gamma: discount
    :param train_freq: env steps (per env) between rounds of updates
    :param gradient_steps: updates per round; -1: as many as env steps collected in the round
        (``train_freq * n_envs``, SB3's meaning)
    :param target_update_interval: updates between target-network refreshes
    :param lstm_horizon: value-prefix LSTM reset period (in model steps)
    :param pb_c_base: pUCT c2
    :param pb_c_init: pUCT c1
    :param dirichlet_alpha: root noise concentration
    :param exploration_fraction: root noise weight
    :param priority_alpha: priority exponent
    :param priority_beta: initial importance-sampling exponent, annealed to 1 over training
    :param auto_td_period: adaptive horizon: ``td_steps`` shrinks by one per this many transitions of
        age (None: fixed horizon)
    :param segment_length: episodes are stored as segments of at most this many transitions
    :param lr_warmup_steps: updates of linear learning-rate warm-up
    :param max_grad_norm: gradient clipping
    :param value_loss_coef: value loss weight (EfficientZero: 0.25)
    :param reward_loss_coef: value-prefix loss weight (1)
    :param policy_loss_coef: policy loss weight (1)
    :param consistency_loss_coef: SimSiam consistency loss weight (2)
    :param augment: random shifts (4 pixels) and intensity changes of image observations during training
    :param visit_temperature: actions are sampled from ``visits^(1/T)`` while training; ``None`` follows
        EfficientZero (T = 1, then 0.5 after half of training, 0.25 after three quarters)
    :param policy_kwargs: keywords of the policy (``net_kwargs`` for the network sizes, the optimizer)
    :param stats_window_size: episodes averaged in the logs
    :param tensorboard_log: tensorboard log folder
    :param verbose: 0 silent, 1 info, 2 debug
    :param seed: seed of everything (envs, torch, replay sampling, search)
    :param device: "auto", "cpu" or "cuda"

    Every numeric hyperparameter is range-checked here (``ValueError`` naming the value and the range);
    a non-finite reward or observation stops learning with a ``ValueError`` naming the step and env.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "CnnPolicy": CnnPolicy,
        "MlpPolicy": MlpPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    policy: DelayedEZPolicy

    def __init__(
        self,
        policy: str | type[DelayedEZPolicy],
        env: GymEnv | str | None,
        learning_rate: float | Schedule = 0.2,
        buffer_size: int = 100_000,
        learning_starts: int = 2000,
        batch_size: int = 256,
        num_simulations: int = 50,
        num_unroll_steps: int = 5,
        td_steps: int = 5,
        reanalyze_ratio: float = 0.99,
        forward_model: bool = True,
        gamma: float = 0.997**4,
        train_freq: int = 1,
        gradient_steps: int = 1,
        target_update_interval: int = 200,
        lstm_horizon: int = 5,
        pb_c_base: float = 19652.0,
        pb_c_init: float = 1.25,
        dirichlet_alpha: float = 0.3,
        exploration_fraction: float = 0.25,
        priority_alpha: float = 0.6,
        priority_beta: float = 0.4,
        auto_td_period: int | None = 30_000,
        segment_length: int = 200,
        lr_warmup_steps: int = 1000,
        max_grad_norm: float = 5.0,
        value_loss_coef: float = 0.25,
        reward_loss_coef: float = 1.0,
        policy_loss_coef: float = 1.0,
        consistency_loss_coef: float = 2.0,
        augment: bool = True,
        visit_temperature: float | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        _check_hyperparameters(locals())
        super().__init__(
            policy,
            env,
            learning_rate,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
        )
        self.buffer_size = buffer_size
        self.learning_starts = learning_starts
        self.batch_size = batch_size
        self.num_simulations = num_simulations
        self.num_unroll_steps = num_unroll_steps
        self.td_steps = td_steps
        self.reanalyze_ratio = reanalyze_ratio
        self.forward_model = forward_model
        self.gamma = gamma
        self.train_freq = train_freq
        self.gradient_steps = gradient_steps
        self.target_update_interval = target_update_interval
        self.lstm_horizon = lstm_horizon
        self.pb_c_base = pb_c_base
        self.pb_c_init = pb_c_init
        self.dirichlet_alpha = dirichlet_alpha
        self.exploration_fraction = exploration_fraction
        self.priority_alpha = priority_alpha
        self.priority_beta = priority_beta
        self.auto_td_period = auto_td_period
        self.segment_length = segment_length
        self.lr_warmup_steps = lr_warmup_steps
        self.max_grad_norm = max_grad_norm
        self.value_loss_coef = value_loss_coef
        self.reward_loss_coef = reward_loss_coef
        self.policy_loss_coef = policy_loss_coef
        self.consistency_loss_coef = consistency_loss_coef
        self.augment = augment
        self.visit_temperature = visit_temperature
        self.replay_buffer: PrioritizedGameBuffer | None = None
        self._writers: list[GameWriter] | None = None
        if self.env is not None:
            self._check_env(self.env)
        if _init_setup_model:
            self._setup_model()

    # ----------------------------------------------------------------- setup
    def _check_env(self, env: VecEnv) -> None:
        if not isinstance(self.action_space, spaces.Discrete):
            raise ValueError(
                f"DelayedEZ plans over a finite action set and needs a Discrete action space, got {self.action_space}; "
                "use PWM for continuous actions"
            )
        if int(self.action_space.start) != 0:
            raise ValueError(
                f"DelayedEZ needs a Discrete action space starting at 0, got start={self.action_space.start}"
            )
        delayed = env.env_is_wrapped(ExecutionDelay)
        with_view = env.env_is_wrapped(PendingActionsObservation)
        if any(d and not v for d, v in zip(delayed, with_view)):
            raise ValueError(
                "the env has an ExecutionDelay but the agent cannot see the pending actions; wrap it as "
                "PendingActionsObservation(ExecutionDelay(env, delay)) and use 'MultiInputPolicy'"
            )

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.policy = self.policy_class(
            self.observation_space,
            self.action_space,
            self.lr_schedule,
            num_simulations=self.num_simulations,
            discount=self.gamma,
            lstm_horizon=self.lstm_horizon,
            pb_c_base=self.pb_c_base,
            pb_c_init=self.pb_c_init,
            dirichlet_alpha=self.dirichlet_alpha,
            exploration_fraction=self.exploration_fraction,
            forward_model=self.forward_model,
            seed=self.seed,
            **self.policy_kwargs,
        )
        self.policy = self.policy.to(self.device)
        self.replay_buffer = PrioritizedGameBuffer(self.buffer_size, self.priority_alpha)
        self._rng = np.random.default_rng(self.seed)
        self._writers = None

    def _setup_lr_schedule(self) -> None:
        self.lr_schedule = FloatSchedule(self.learning_rate)

    def set_random_seed(self, seed: int | None = None) -> None:
        """Seed python, numpy, torch, the envs, the replay sampling and the search (noise and tie-breaks)."""
        super().set_random_seed(seed)
        if seed is None:
            return
        self._rng = np.random.default_rng(seed)
        if getattr(self, "policy", None) is not None:
            self.policy.reseed(seed)

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return ["policy", "policy.optimizer"], []

    # ----------------------------------------------------------------- replay buffer I/O
    def save_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:
        """Save the replay buffer as plain arrays (``.npz``, no pickle).

        :param path: file path or writable binary file
        """
        if self.replay_buffer is None:
            raise ValueError("the replay buffer is not defined")
        if isinstance(path, (str, pathlib.Path)):
            path = pathlib.Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "wb") as handle:
                np.savez(handle, **self.replay_buffer.state_arrays())
        else:
            np.savez(path, **self.replay_buffer.state_arrays())

    def load_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:
        """Load a replay buffer saved by :meth:`save_replay_buffer` (never unpickles).

        :param path: file path or readable binary file
        """
        with np.load(path, allow_pickle=False) as arrays:
            _check_replay_arrays(arrays, self.observation_space, self.action_space)
            self.replay_buffer = PrioritizedGameBuffer.from_arrays(arrays)

    # ----------------------------------------------------------------- acting
    def _observation_part(self, obs: Any) -> np.ndarray:
        return obs["observation"] if isinstance(obs, dict) else obs

    def _temperature(self) -> float:
        """The visit-count temperature (EfficientZero: 1, 0.5 after half of training, 0.25 after three quarters)."""
        if self.visit_temperature is not None:
            return self.visit_temperature
        done = 1.0 - self._current_progress_remaining
        return 1.0 if done < 0.5 else (0.5 if done < 0.75 else 0.25)

    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Actions from one batched search (deterministic: the most visited root action).

        The search draws from the model's seeded generator (:meth:`set_random_seed`), so the same
        seed, weights and observations give the same actions.
        """
        return self.policy.predict(observation, state, episode_start, deterministic)

    # ----------------------------------------------------------------- learning
    def learn(
        self: SelfDelayedEZ,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 4,
        tb_log_name: str = "DelayedEZ",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfDelayedEZ:
        """Act with batched searches, store game segments, and train (see the module docstring).

        :param total_timesteps: env steps (summed over envs)
        :param callback: SB3 callback(s), called after every vectorised step
        :param log_interval: dump the logs every this many finished episodes
        :param tb_log_name: tensorboard run name
        :param reset_num_timesteps: restart the step counter (and the envs)
        :param progress_bar: show a progress bar (tqdm, rich)
        """
        total_timesteps, callback = self._setup_learn(
            total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar
        )
        assert self.env is not None and self.replay_buffer is not None
        check_finite_step(self.num_timesteps, self._last_obs)
        warn_if_no_update(self.learning_starts, total_timesteps)
        gradient_steps = self.gradient_steps if self.gradient_steps >= 0 else self.train_freq * self.n_envs
        if self._writers is None or reset_num_timesteps or len(self._writers) != self.n_envs:
            self._writers = [GameWriter(self.action_space.n, self.segment_length) for _ in range(self.n_envs)]
            first = self._observation_part(self._last_obs)
            for env_index, writer in enumerate(self._writers):
                writer.start(first[env_index])
        callback.on_training_start(locals(), globals())
        episodes_logged = self._episode_num
        steps = 0
        while self.num_timesteps < total_timesteps:
            decision = self._act(self._last_obs)
            for env_index, writer in enumerate(self._writers):
                writer.record_search(decision.visits[env_index], int(decision.root_offsets[env_index]))
            new_obs, rewards, dones, infos = self.env.step(decision.actions)
            self.num_timesteps += self.n_envs
            steps += 1
            self._update_info_buffer(infos, dones)
            self._store(decision.actions, new_obs, rewards, dones, infos)
            self._last_obs = new_obs
            self._last_episode_starts = dones
            callback.update_locals(locals())
            if not callback.on_step():
                break
            self._update_current_progress_remaining(self.num_timesteps, total_timesteps)
            if (
                self.num_timesteps >= self.learning_starts
                and len(self.replay_buffer) > 0
                and steps % self.train_freq == 0
                and gradient_steps > 0
            ):
                self.train(gradient_steps, self.batch_size)
            if log_interval and self._episode_num - episodes_logged >= log_interval:
                episodes_logged = self._episode_num
                self.dump_logs()
        callback.on_training_end()
        return self

    def _act(self, obs: Any) -> ActOutput:
        obs_tensor = obs_as_tensor(obs, self.device)
        return self.policy.act(obs_tensor, deterministic=False, add_noise=True, temperature=self._temperature())

    def _store(
        self, actions: np.ndarray, new_obs: Any, rewards: np.ndarray, dones: np.ndarray, infos: list[dict]
    ) -> None:
        assert self._writers is not None and self.replay_buffer is not None
        check_finite_step(self.num_timesteps, new_obs, rewards, infos)
        next_part = self._observation_part(new_obs)
        for env_index, writer in enumerate(self._writers):
            info = infos[env_index]
            executed = info.get("executed_action", actions[env_index])
            if dones[env_index]:
                final = self._observation_part(info["terminal_observation"])
                truncated = bool(info.get("TimeLimit.truncated", False))
                segment = writer.step(int(executed), float(rewards[env_index]), final, not truncated, truncated)
            else:
                segment = writer.step(int(executed), float(rewards[env_index]), next_part[env_index], False, False)
            if segment is not None:
                self.replay_buffer.add(segment)
            if dones[env_index]:
                self._episode_num += 1
                writer.start(next_part[env_index])

    def _to_obs_tensor(self, array: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(array, device=self.device)

    def _targets(self, batch: ReplayBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Value targets ``(B, K+1)``, policy targets ``(B, K+1, A)`` and the policy mask ``(B, K+1)``.

        Values bootstrap from the target network; the first ``reanalyze_ratio`` of the batch gets its
        policy targets from a fresh search with the target network (Dirichlet noise at the roots).
        """
        target_net = self.policy.target_network
        size, width = batch.returns.shape
        with torch.no_grad():
            flat_obs = self._to_obs_tensor(batch.bootstrap_obs.reshape(size * width, *batch.bootstrap_obs.shape[2:]))
            bootstrap = target_net.to_scalar(target_net.initial_inference(flat_obs).value_logits).view(size, width)
            values = torch.as_tensor(batch.returns, device=self.device) + torch.as_tensor(
                batch.bootstrap_discount, device=self.device
            ) * bootstrap
            policies = torch.as_tensor(batch.stored_policy, device=self.device)
            mask = torch.as_tensor(batch.stored_policy_mask, device=self.device)
            num_reanalyzed = int(round(self.reanalyze_ratio * size))
            if num_reanalyzed > 0:
                valid = batch.policy_valid[:num_reanalyzed]
                rows, cols = np.nonzero(valid)
                for start in range(0, len(rows), REANALYSIS_CHUNK):
                    r, c = rows[start : start + REANALYSIS_CHUNK], cols[start : start + REANALYSIS_CHUNK]
                    root = target_net.initial_inference(self._to_obs_tensor(batch.policy_obs[r, c]))
                    search = self.policy.mcts.search(target_net, root.latent, root.policy_logits, self._rng, True)
                    visits = torch.as_tensor(search.visits, dtype=torch.float32, device=self.device)
                    policies[r, c] = visits / visits.sum(dim=1, keepdim=True)
                    mask[r, c] = 1.0
        return values, policies, mask

    def train(self, gradient_steps: int, batch_size: int) -> None:
        """Run ``gradient_steps`` updates of the model (see the module docstring)."""
        assert self.replay_buffer is not None
        self.policy.set_training_mode(True)
        network = self.policy.network
        support = network.support
        optimizer = self.policy.optimizer
        names = ("loss", "value_loss", "value_prefix_loss", "policy_loss", "consistency_loss")
        logs: dict[str, list[float]] = {name: [] for name in names}
        for _ in range(gradient_steps):
            warmup = min(1.0, (self._n_updates + 1) / self.lr_warmup_steps) if self.lr_warmup_steps > 0 else 1.0
            lr = self.lr_schedule(self._current_progress_remaining) * warmup
            for group in optimizer.param_groups:
                group["lr"] = lr
            beta = self.priority_beta + (1.0 - self.priority_beta) * (1.0 - self._current_progress_remaining)
            batch = self.replay_buffer.sample(
                batch_size, self.num_unroll_steps, self.td_steps, self.gamma, self.lstm_horizon, self._rng, beta,
                self.auto_td_period,
            )
            target_values, target_policies, policy_mask = self._targets(batch)
            obs = self._to_obs_tensor(batch.obs)
            target_obs = self._to_obs_tensor(batch.target_obs)
            if self.augment and network.image:
                obs = random_intensity(random_shift(obs, 4))
                target_obs = random_intensity(random_shift(target_obs.flatten(0, 1), 4)).view(target_obs.shape)
            actions = torch.as_tensor(batch.actions, device=self.device)
            value_prefix_targets = torch.as_tensor(batch.target_value_prefix, device=self.device)
            value_prefix_mask = torch.as_tensor(batch.value_prefix_mask, device=self.device)
            value_mask = torch.as_tensor(batch.value_mask, device=self.device)
            consistency_mask = torch.as_tensor(batch.consistency_mask, device=self.device)
            weights = torch.as_tensor(batch.weights, device=self.device)

            with torch.no_grad():
                target_latents = network.represent(target_obs.flatten(0, 1))
                target_proj = network.project(target_latents, with_grad=False).view(*target_obs.shape[:2], -1)

            root = network.initial_inference(obs)
            latent = root.latent
            value_loss = _categorical_loss(
                root.value_logits, two_hot(h_transform(target_values[:, 0]), support)
            ) * value_mask[:, 0]
            policy_loss = _categorical_loss(root.policy_logits, target_policies[:, 0]) * policy_mask[:, 0]
            value_prefix_loss = torch.zeros_like(value_loss)
            consistency_loss = torch.zeros_like(value_loss)
            lstm_state = network.initial_lstm_state(obs.shape[0])
            for u in range(self.num_unroll_steps):
                latent, lstm_state, value_prefix_logits = network.dynamics(latent, actions[:, u], lstm_state)
                value_logits, policy_logits = network.prediction(latent)
                online_proj = network.project(latent, with_grad=True)
                consistency_loss = consistency_loss - (
                    F.normalize(online_proj, dim=-1) * F.normalize(target_proj[:, u], dim=-1)
                ).sum(-1) * consistency_mask[:, u]
                value_prefix_loss = value_prefix_loss + _categorical_loss(
                    value_prefix_logits, two_hot(h_transform(value_prefix_targets[:, u]), support)
                ) * value_prefix_mask[:, u]
                value_loss = value_loss + _categorical_loss(
                    value_logits, two_hot(h_transform(target_values[:, u + 1]), support)
                ) * value_mask[:, u + 1]
                policy_step = _categorical_loss(policy_logits, target_policies[:, u + 1]) * policy_mask[:, u + 1]
                policy_loss = policy_loss + policy_step
                if latent.requires_grad:
                    latent.register_hook(lambda grad: grad * 0.5)
                if (u + 1) % self.lstm_horizon == 0:
                    lstm_state = network.initial_lstm_state(obs.shape[0])
            per_sample = (
                self.consistency_loss_coef * consistency_loss
                + self.value_loss_coef * value_loss
                + self.reward_loss_coef * value_prefix_loss
                + self.policy_loss_coef * policy_loss
            )
            loss = (weights * per_sample).mean()
            optimizer.zero_grad()
            (loss / self.num_unroll_steps).backward()
            torch.nn.utils.clip_grad_norm_(network.parameters(), self.max_grad_norm)
            optimizer.step()
            self._n_updates += 1

            with torch.no_grad():
                predicted = network.to_scalar(root.value_logits)
                priorities = (predicted - target_values[:, 0]).abs().cpu().numpy()
            self.replay_buffer.update_priorities(batch.games, batch.positions, priorities)
            if self._n_updates % self.target_update_interval == 0:
                self.policy.refresh_target()
            logs["loss"].append(loss.item())
            logs["value_loss"].append(value_loss.mean().item())
            logs["value_prefix_loss"].append(value_prefix_loss.mean().item())
            logs["policy_loss"].append(policy_loss.mean().item())
            logs["consistency_loss"].append(consistency_loss.mean().item())
        self.policy.set_training_mode(False)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/learning_rate", optimizer.param_groups[0]["lr"])
        for key, values in logs.items():
            self.logger.record(f"train/{key}", float(np.mean(values)))

    def dump_logs(self) -> None:
        """Write episode statistics, speed and the latest training losses to the logger."""
        elapsed = max((time.time_ns() - self.start_time) / 1e9, sys.float_info.epsilon)
        fps = int((self.num_timesteps - self._num_timesteps_at_start) / elapsed)
        self.logger.record("time/episodes", self._episode_num, exclude="tensorboard")
        if self.ep_info_buffer:
            self.logger.record("rollout/ep_rew_mean", safe_mean([ep["r"] for ep in self.ep_info_buffer]))
            self.logger.record("rollout/ep_len_mean", safe_mean([ep["l"] for ep in self.ep_info_buffer]))
        self.logger.record("time/fps", fps)
        self.logger.record("time/time_elapsed", int(elapsed), exclude="tensorboard")
        self.logger.record("time/total_timesteps", self.num_timesteps, exclude="tensorboard")
        self.logger.dump(step=self.num_timesteps)
