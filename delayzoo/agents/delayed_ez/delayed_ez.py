"""DelayedEZ: EfficientZero under stochastic execution delay, on Stable-Baselines3's ``OffPolicyAlgorithm``.

One training iteration, top to bottom (SB3's ``learn`` loop calls these): :meth:`DelayedEZ._sample_action`
acts and :meth:`DelayedEZ._store_transition` writes the games (the acting part,
:mod:`~delayzoo.agents.delayed_ez.self_play`); every ``train_freq`` steps :meth:`DelayedEZ.train` samples
``gradient_steps`` batches with priorities, gets their targets (the reanalysis part,
:mod:`~delayzoo.agents.delayed_ez.reanalysis`) and runs the updates (:mod:`~delayzoo.agents.delayed_ez.update`).
The Ray actors (:mod:`~delayzoo.agents.delayed_ez.actors`) hold the same acting and reanalysis parts.
"""

from __future__ import annotations

import io
import pathlib
import time
from collections import defaultdict
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.vec_env import VecEnv

from delayzoo.agents.common.checks import (
    check_finite_step,
    warn_if_no_update,
)
from delayzoo.agents.common.plain_save import PlainSaveMixin
from delayzoo.agents.common.precision import grad_scaler
from delayzoo.agents.common.replay_files import read_replay_file, save_replay_file
from delayzoo.agents.common.run_time import report_first_update
from delayzoo.agents.delayed_ez.actors import ActorParts
from delayzoo.agents.delayed_ez.config import (
    GROUPS,
    ActorConfig,
    ReplayConfig,
    SearchConfig,
    TargetConfig,
    check_flat_settings,
    check_group,
    regroup,
    regroup_keywords,
)
from delayzoo.agents.delayed_ez.distributed import ActorRun, RayActorsMixin, actor_env_factory, env_for_spaces
from delayzoo.agents.delayed_ez.losses import LossCoefficients
from delayzoo.agents.delayed_ez.policies import CnnPolicy, DelayedEZPolicy, MlpPolicy, MultiInputPolicy
from delayzoo.agents.delayed_ez.reanalysis import Reanalysis, ReanalysisConfig, ReanalysisCounts, RoundTargets, Targets
from delayzoo.agents.delayed_ez.replay import PrioritizedGameBuffer, ReplayBatch, check_replay_arrays
from delayzoo.agents.delayed_ez.self_play import (
    SelfPlay,
    SelfPlayConfig,
    check_clip_reward,
    check_env,
)
from delayzoo.agents.delayed_ez.update import (
    LOGGED_LOSSES,
    UpdateConfig,
    learning_rate,
    update_on_batch,
    warn_if_augment_distorts,
)

__all__ = ["DelayedEZ"]

SelfDelayedEZ = TypeVar("SelfDelayedEZ", bound="DelayedEZ")


class DelayedEZ(PlainSaveMixin, RayActorsMixin, OffPolicyAlgorithm):
    """EfficientZero with a forward model over the pending actions (Delayed-EZ, ICLR 2024).

    >>> import gymnasium as gym
    >>> from delayzoo.wrappers import ExecutionDelay, RandomWalkDelay, PendingActionsObservation
    >>> env = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(5)))
    >>> model = DelayedEZ("MultiInputPolicy", env).learn(30_000)  # doctest: +SKIP

    Optimiser: SGD with momentum 0.9 and weight decay 1e-4 at 0.2, linear warm-up over ``lr_warmup_steps``
    updates, then x``lr_decay_rate`` every ``lr_decay_steps`` updates (EfficientZero's Atari schedule); Adam can
    be chosen with ``policy_kwargs=dict(optimizer_class=torch.optim.Adam)`` (our CartPole settings do).

    Differences from EfficientZero and the Delayed-EZ reference code, and why (the agents page,
    ``docs/agents.md#delayedez-differences-in-detail``, has the longer explanations and measurements):

    - the reference's two bugs that stop a delay experiment (a missing attribute, a queue popped but never
      filled) are fixed; delays come from the env's ``ExecutionDelay`` through ``PendingActionsObservation``;
    - acting and updating alternate in one process (SB3's loop); on Ray actors (``actor_kwargs``) self-play is
      throttled to that replay ratio and the learner samples the batches: the same data as in-process runs;
    - a round's batches are reanalysed together with the target network of the round's start (EZ: per batch,
      refreshed every 200 updates): one batched search, the same staleness order;
    - the replay stores frames once and stacks them at sample time, and samples with replacement over
      transitions (EZ: JPEG stacks, without replacement within a batch): less memory, the same expectation;
    - the search's tie-breaks are seeded (EZ reseeds from the clock), so runs are reproducible;
    - latent min-max normalisation is on for the vector network we add (off for the conv one, as EZ's Atari
      model): it keeps the small residual MLP bounded;
    - policy targets are paired with the observation the search was rooted at (under delay, the forecast
      step; the reference pairs them with the decision step); ``forecast_policy="reanalyse"`` is the
      reference's way, an option not shown better;
    - the Oblivious-EZ baseline (``forward_model=False``) stores the decided actions, as the paper's;
      ``replay_actions="executed"`` is a stronger baseline;
    - rewards are clipped for learning only with ``clip_reward`` (the zoo's Atari entry sets it, as EZ);
    - the consistency targets of the ``K`` unroll steps are encoded in one call (EZ: one per step): fewer, larger
      operations (their BatchNorm statistics are then taken over the ``K`` steps together);
    - the search from a forecast root starts a fresh value-prefix LSTM state (the reference carries the roll's,
      which was never trained to start mid-sequence);
    - each env draws its own delay path, starts with ``init_action`` fillers and keeps the actions in flight at a
      life loss (the reference shares one walk, plans its queue with M searches and refills it at life losses);
    - mixed precision is off by default (the reference's default is float16 autocast); on a CPU it is bfloat16;
    - options, the paper's way staying the default: ``search_kwargs=dict(method="gumbel")`` (EfficientZero V2's
      search), ``q_normalization="parent_siblings"`` (mctx's per-node Q), ``net_kwargs=dict(hidden_norm=
      "layer", value_prefix_norm="layer")`` (norms that do not mix the unroll steps, both network families),
      ``consistency_filter`` (EfficientZero V2's); ``use_root_value`` searches every bootstrap observation of a
      round, past an episode end too.

    :param policy: "CnnPolicy", "MlpPolicy", "MultiInputPolicy" or a :class:`DelayedEZPolicy` subclass
    :param env: env or VecEnv (all envs act through one batched search); under delay it must expose the queue
        through ``PendingActionsObservation``; with self-play actors also an env id or a picklable env factory
    :param learning_rate: peak learning rate (constant or schedule of the remaining progress)
    :param buffer_size: transitions kept in the replay
    :param learning_starts: env steps before the first update
    :param batch_size: samples per update
    :param num_simulations: search simulations per decision
    :param num_unroll_steps: model unroll steps per sample (K)
    :param td_steps: n of the n-step value targets
    :param reanalyze_ratio: share of each batch whose policy targets a search with the target network recomputes
    :param consistency_filter: drop a recomputed policy target whose top action is not its search's choice
        (EfficientZero V2's filter; only the Gumbel search's two can differ)
    :param use_root_value: bootstrap the value targets from the root value of a search with the target network
        (EfficientZero's ``--use_root_value``, off there too): reanalysis then costs about twice as much
    :param forward_model: roll the dynamics through the pending actions before searching (False: Oblivious-EZ)
    :param replay_actions: ``"executed"`` (the undelayed MDP) or ``"decided"`` actions are stored; ``None``:
        executed with the forward model, decided without
    :param forecast_policy: ``"store"``: a search rooted at a forecast state is the policy target of the
        observation at ``t + d_t``; ``"reanalyse"``: it only picks the action, and every observation without a
        search rooted at it is reanalysed (without delay both train the same)
    :param clip_reward: the learning rewards: ``True`` their sign (EfficientZero on Atari), ``c > 0`` clipped to
        ``[-c, c]``, ``False`` or 0 as they are
    :param frame_stack: frames stacked channels-first in each observation (the replay stores each once);
        ``None`` reads the env's :class:`~delayzoo.wrappers.atari.FrameStack` (1 without)
    :param gamma: discount (of the search and the targets)
    :param train_freq: update every ``train_freq`` env steps (per env), or ``(n, "episode")``
    :param gradient_steps: updates per round; -1: as many as env steps collected (SB3's meaning)
    :param target_update_interval: updates between target-network refreshes
    :param lstm_horizon: value-prefix LSTM reset period (model steps)
    :param search_kwargs: the search: every field of :class:`~delayzoo.agents.delayed_ez.config.SearchConfig`
        but ``num_simulations``, ``discount`` and ``lstm_horizon`` (pUCT's ``pb_c_base``, ``pb_c_init``,
        ``dirichlet_alpha``, ``exploration_fraction``, ``visit_temperature``; ``method="gumbel"`` and its fields;
        ``q_normalization``), e.g. ``dict(method="gumbel")``; defaults: the paper's
    :param replay_buffer_kwargs: the replay: :class:`~delayzoo.agents.delayed_ez.config.ReplayConfig`'s
        ``priority_alpha``, ``priority_beta``, ``segment_length``
    :param auto_td_period: ``td_steps`` shrinks by one per this many transitions of age (None: fixed)
    :param lr_warmup_steps: updates of linear learning-rate warm-up
    :param lr_decay_steps: after the warm-up, x``lr_decay_rate`` every this many updates (None: no decay)
    :param lr_decay_rate: the decay factor (EfficientZero: 0.1)
    :param final_updates: updates after the last env step of ``learn`` (EfficientZero: 20k after its 100k steps);
        none when the run makes no update
    :param max_grad_norm: gradient clipping
    :param value_loss_coef: value loss weight (EfficientZero: 0.25)
    :param reward_loss_coef: value-prefix loss weight (1)
    :param policy_loss_coef: policy loss weight (1)
    :param consistency_loss_coef: SimSiam consistency loss weight (2)
    :param augment: EfficientZero's random shifts (``AUGMENT_SHIFT`` pixels) and intensity changes of images
        while training; a warning says when the frames are too small for the shift
    :param prefetch: compute the next round's targets while this round trains (its batches then miss this
        round's priority updates): ``True`` in a thread, ``"process"`` (CPU) in a worker process with its own
        target network, ``False`` in the update; the thread and the process train the same
    :param actor_kwargs: Ray actors (:class:`~delayzoo.agents.delayed_ez.config.ActorConfig`: ``self_play_actors``,
        ``reanalysis_actors``, ``ray_address``, ``envs_per_actor``, ``self_play_update_interval``,
        ``self_play_resources``, ``reanalysis_resources``, ``actor_max_restarts``, ``placement_timeout``) and the
        roots per reanalysis search (``reanalysis_chunk``); run settings, not saved: pass them to ``load`` again
    :param policy_kwargs: keywords of the policy (``net_kwargs`` for the network, the optimizer,
        ``mixed_precision``: see :class:`~delayzoo.agents.delayed_ez.policies.DelayedEZPolicy`)
    :param stats_window_size: episodes averaged in the logs
    :param tensorboard_log: tensorboard log folder
    :param verbose: 0 silent, 1 info, 2 debug
    :param seed: seed of everything (envs, torch, replay sampling, search)
    :param device: ``"auto"``, ``"cpu"``, ``"cuda"``... (a CUDA device torch does not see is a ``ValueError``)
    :param _init_setup_model: build the networks now (``load`` builds them later)
    :param former_keywords: flat keywords of earlier versions (``pb_c_init=...``, ``self_play_actors=...``),
        moved into their group with a ``FutureWarning``
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "CnnPolicy": CnnPolicy,
        "MlpPolicy": MlpPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    policy: DelayedEZPolicy
    replay_buffer: PrioritizedGameBuffer  # type: ignore[assignment]
    run_settings: ClassVar[tuple[str, ...]] = ("actor_kwargs",)

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
        consistency_filter: bool = False,
        use_root_value: bool = False,
        forward_model: bool = True,
        replay_actions: str | None = None,
        forecast_policy: str = "store",
        clip_reward: bool | float = False,
        frame_stack: int | None = None,
        gamma: float = 0.997**4,
        train_freq: int | tuple[int, str] = 1,
        gradient_steps: int = 1,
        target_update_interval: int = 200,
        lstm_horizon: int = 5,
        search_kwargs: dict[str, Any] | None = None,
        replay_buffer_kwargs: dict[str, Any] | None = None,
        auto_td_period: int | None = 30_000,
        lr_warmup_steps: int = 1000,
        lr_decay_steps: int | None = None,
        lr_decay_rate: float = 0.1,
        final_updates: int = 0,
        max_grad_norm: float = 5.0,
        value_loss_coef: float = 0.25,
        reward_loss_coef: float = 1.0,
        policy_loss_coef: float = 1.0,
        consistency_loss_coef: float = 2.0,
        augment: bool = True,
        prefetch: bool | str = True,
        actor_kwargs: dict[str, Any] | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
        **former_keywords: Any,
    ) -> None:
        if former_keywords:  # flat keywords of earlier versions, moved into their groups
            search_kwargs, replay_buffer_kwargs, actor_kwargs = regroup_keywords(former_keywords, locals())
        check_flat_settings(locals())
        self._env_source = env  # what self-play actors rebuild their envs from
        super().__init__(
            policy, env_for_spaces(env), learning_rate, buffer_size=buffer_size, learning_starts=learning_starts,
            batch_size=batch_size, gamma=gamma, train_freq=train_freq, gradient_steps=gradient_steps,
            policy_kwargs=policy_kwargs, stats_window_size=stats_window_size, tensorboard_log=tensorboard_log,
            verbose=verbose, device=device, support_multi_env=True, seed=seed, sde_support=False,
        )
        self.num_simulations, self.num_unroll_steps, self.td_steps = num_simulations, num_unroll_steps, td_steps
        self.reanalyze_ratio, self.use_root_value, self.forward_model = reanalyze_ratio, use_root_value, forward_model
        self.replay_actions = ("executed" if forward_model else "decided") if replay_actions is None else replay_actions
        self.forecast_policy, self.clip_reward = forecast_policy, check_clip_reward(clip_reward)
        self.frame_stack, self.lstm_horizon = frame_stack, lstm_horizon
        for group, values in zip(GROUPS, (search_kwargs, replay_buffer_kwargs, actor_kwargs)):
            setattr(self, group, check_group(group, values))
        self.auto_td_period, self.lr_warmup_steps = auto_td_period, lr_warmup_steps
        self.target_update_interval = target_update_interval
        self.lr_decay_steps, self.lr_decay_rate, self.final_updates = lr_decay_steps, lr_decay_rate, final_updates
        self.value_loss_coef, self.reward_loss_coef = value_loss_coef, reward_loss_coef
        self.policy_loss_coef, self.consistency_loss_coef = policy_loss_coef, consistency_loss_coef
        self.max_grad_norm, self.augment, self.consistency_filter = max_grad_norm, augment, consistency_filter
        self.prefetch = prefetch if prefetch == "process" else bool(prefetch)
        self._build_configs()
        self._reset_run_state()
        if self.actor_config.self_play_actors:
            actor_env_factory(self._env_source)  # a ValueError now for an env the actors cannot rebuild
        if self.env is not None:
            self._check_env(self.env)
        if _init_setup_model:
            self._setup_model()

    # ----------------------------------------------------------------- setup
    def _build_configs(self) -> None:
        """The configuration objects, from the attributes of the same names (see :mod:`.config`)."""
        if self.prefetch == "process" and self.device.type != "cpu":
            raise ValueError(
                f"prefetch='process' reanalyses in a CPU worker process, but the model is on {self.device}; "
                "use prefetch=True there"
            )
        self.search_config = SearchConfig(
            num_simulations=self.num_simulations, discount=self.gamma, lstm_horizon=self.lstm_horizon,
            **check_group("search_kwargs", self.search_kwargs),
        )
        self.target_config = TargetConfig(
            num_unroll_steps=self.num_unroll_steps, td_steps=self.td_steps, discount=self.gamma,
            lstm_horizon=self.lstm_horizon, reanalyze_ratio=self.reanalyze_ratio, auto_td_period=self.auto_td_period,
            use_root_value=self.use_root_value,
        )
        self.replay_config = ReplayConfig(**check_group("replay_buffer_kwargs", self.replay_buffer_kwargs))
        self.actor_config = ActorConfig(**check_group("actor_kwargs", self.actor_kwargs))
        self.actor_config.check_ray()
        self.self_play_config = SelfPlayConfig(
            self.replay_config.segment_length, self.frame_stack or 1, self.replay_actions, self.forecast_policy,
            self.clip_reward,
        )

    def _reset_run_state(self) -> None:
        """The state of a run that is not the model: actors, prefetched targets, the worker, the acting part."""
        self._actors: ActorRun | None = None
        self._round_targets = RoundTargets()
        self._projection_due = False  # set by each learn: its first round reports the run time
        self._final_updates_done = 0
        self._self_play: SelfPlay | None = None

    def _check_env(self, env: VecEnv) -> None:
        """Refuse an env DelayedEZ cannot act on (constructor, ``set_env`` and ``load`` alike: see
        :func:`~delayzoo.agents.delayed_ez.self_play.check_env`); read ``frame_stack`` from it when unset."""
        self.frame_stack = check_env(env, self.action_space, self.frame_stack)

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self._convert_train_freq()
        if self.frame_stack is None:
            self.frame_stack = 1
        self._build_configs()
        self.policy = self.actor_parts().build_policy(
            self.observation_space, self.action_space, self.device, self.seed, self.lr_schedule
        )
        warn_if_augment_distorts(self.policy.network, self.augment)
        self._grad_scaler = grad_scaler(self.device, self.policy.mixed_precision)
        self.replay_buffer = PrioritizedGameBuffer(
            self.buffer_size, self.replay_config.priority_alpha, frame_stack=self.frame_stack
        )
        self._rng = np.random.default_rng(self.seed)
        self._self_play = None

    def actor_parts(self) -> ActorParts:
        """What this learner's policy, acting and reanalysis are made of, for its actors (and itself)."""
        return ActorParts(
            self.policy_class, dict(self.policy_kwargs), self.search_config, self.forward_model, self.self_play_config,
            ReanalysisConfig(
                frame_stack=self.frame_stack or 1, reanalyze_ratio=self.reanalyze_ratio,
                chunk=self.actor_config.reanalysis_chunk, consistency_filter=self.consistency_filter,
                reanalyse_missing=self.forecast_policy == "reanalyse", use_root_value=self.target_config.use_root_value,
                mixed_precision=self.policy.mixed_precision if getattr(self, "policy", None) is not None
                else self.policy_kwargs.get("mixed_precision", False),
            ),
            float(self.lr_schedule(self._current_progress_remaining)),
        )

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

    @classmethod
    def upgrade_settings(cls, settings: dict[str, Any], where: str) -> dict[str, Any]:
        """The flat keywords of earlier versions moved into their groups, with a ``FutureWarning``."""
        return regroup(settings, where)

    @classmethod
    def load(  # type: ignore[override]
        cls: type[SelfDelayedEZ],
        path: str | pathlib.Path | io.BufferedIOBase,
        env: GymEnv | str | Any | None = None,
        device: torch.device | str = "auto",
        custom_objects: dict[str, Any] | None = None,
        print_system_info: bool = False,
        force_reset: bool = True,
        **kwargs: Any,
    ) -> SelfDelayedEZ:
        """Load a model saved by :meth:`save` (see :meth:`PlainSaveMixin.load`).

        The actor settings are run settings, not saved: a loaded model trains in-process unless they are
        passed again (``load(path, env, actor_kwargs=dict(self_play_actors=2))``); ``env`` may then be an env id
        or a picklable env factory, as for the constructor.
        """
        source = env
        if isinstance(env, str):
            env = gym.make(env)
        elif callable(env) and not isinstance(env, (gym.Env, VecEnv)):
            env = env()
        kwargs = regroup(kwargs, "DelayedEZ.load()")
        for group in GROUPS:
            if group in kwargs:
                kwargs[group] = check_group(group, kwargs[group])
        model = super().load(path, env, device, custom_objects, print_system_info, force_reset, **kwargs)
        if source is not None:
            model._env_source = source
        return model

    def set_parameters(
        self, load_path_or_dict: Any, exact_match: bool = True, device: torch.device | str = "auto"
    ) -> None:
        """SB3's ``set_parameters``; a reanalysis worker gets the new target network with its next batches."""
        super().set_parameters(load_path_or_dict, exact_match, device)
        self._round_targets.refreshed()

    # ----------------------------------------------------------------- replay buffer I/O
    def save_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:
        """Save the replay buffer and the running episodes' transitions to ``path`` as plain arrays (``.npz``)."""
        if self.replay_buffer is None:
            raise ValueError("the replay buffer is not defined")
        running = self._self_play.unfinished() if self._self_play is not None else []
        save_replay_file(path, "DelayedEZ", self.replay_buffer.state_arrays(running))

    def load_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase, truncate_last_traj: bool = True) -> None:
        """Load a replay buffer saved by :meth:`save_replay_buffer` for this model's spaces (never unpickles); the
        model is left unchanged when the file is refused (a ``ReplayFileError`` naming it). Episodes running when it
        was saved come back as cut segments, so ``truncate_last_traj`` (SB3's signature) has nothing to do.
        """
        arrays = read_replay_file(path, "DelayedEZ")
        observation = self.observation_space
        if isinstance(observation, spaces.Dict):
            observation = observation["observation"]
        check_replay_arrays(path, arrays, tuple(observation.shape), int(self.action_space.n), self.frame_stack)
        buffer = PrioritizedGameBuffer.from_arrays(arrays, path)
        self._round_targets.drop()
        self.replay_buffer = buffer

    # ----------------------------------------------------------------- acting and storing
    def predict(
        self,
        observation: np.ndarray | dict[str, np.ndarray],
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = False,
    ) -> tuple[np.ndarray, tuple[np.ndarray, ...] | None]:
        """Actions from one batched search (deterministic: the most visited root action).

        The search draws from the model's seeded generator (:meth:`set_random_seed`), so the same seed, weights
        and observations give the same actions.
        """
        return self.policy.predict(observation, state, episode_start, deterministic)

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ):
        result = super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)
        warn_if_no_update(self.learning_starts, result[0])
        self._projection_due = True
        self._final_updates_done = 0
        if self._actors is not None and self._actors.self_play:
            self._self_play = None  # the self-play actors write the segments
        elif self._self_play is None or reset_num_timesteps or len(self._self_play.writers) != self.n_envs:
            check_finite_step(self.num_timesteps, self._last_obs)
            self._self_play = SelfPlay(self.policy, self.self_play_config, self.n_envs)
            self._self_play.start(self._last_obs)
        return result

    def _sample_action(
        self, learning_starts: int, action_noise: ActionNoise | None = None, n_envs: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """One batched search for all envs (with root noise, from the start: its visits are policy targets)."""
        assert self._self_play is not None
        actions = self._self_play.act(self._last_obs, self.search_config.temperature(self._current_progress_remaining))
        return actions, actions

    def _store_transition(
        self,
        replay_buffer: PrioritizedGameBuffer,  # type: ignore[override]
        buffer_action: np.ndarray,
        new_obs: Any,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """The acting part writes the step; the segments it finishes go to the replay."""
        assert self._self_play is not None
        check_finite_step(self.num_timesteps, new_obs, reward, infos)
        for segment in self._self_play.store(buffer_action, new_obs, reward, dones, infos):
            replay_buffer.add(segment)
        self._last_obs = new_obs

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
        """Train for ``total_timesteps`` env steps (SB3's ``learn``), then run ``final_updates`` more updates.

        With actors (``actor_kwargs``), they are started (and Ray, if needed) for this call and stopped at its end,
        also on an error or Ctrl-C / SIGTERM.
        """
        try:
            self._start_actors()
            super().learn(
                total_timesteps=total_timesteps, callback=callback, log_interval=log_interval,
                tb_log_name=tb_log_name, reset_num_timesteps=reset_num_timesteps, progress_bar=progress_bar,
            )
            if self._actors is not None and self._round_updates() > 0:
                for _ in range(self._actors.owed_rounds(self)):
                    self.train(self._round_updates(), self.batch_size)
            if self.num_timesteps >= self._total_timesteps and len(self.replay_buffer) > 0:
                per_round = max(int(self.gradient_steps), 1)
                while (left := self._final_updates_left()) > 0:
                    self.train(min(per_round, left), self.batch_size)
                    self._final_updates_done += min(per_round, left)
            if self._actors is not None:
                self._actors.record(self)
            if self._final_updates_done or self._actors is not None:
                self.logger.dump(step=self.num_timesteps)
        finally:
            self._round_targets.drop()
            self._stop_actors()
        return self

    def _final_updates_left(self) -> int:
        """``final_updates`` still to run in this ``learn``: none when the run makes no update (it ends at or
        before ``learning_starts``), since updates after the last step follow the run's own updates."""
        if self._total_timesteps <= self.learning_starts:
            return 0
        return max(self.final_updates - self._final_updates_done, 0)

    def _reanalysis(self) -> Reanalysis:
        """The learner's reanalysis part (its target network and search)."""
        return Reanalysis(self.policy.target_network, self.policy.mcts, self.actor_parts().reanalysis, self.device)

    def train(self, gradient_steps: int, batch_size: int) -> None:
        """Run ``gradient_steps`` updates on batches sampled and reanalysed together (see the module docstring).

        The first round of each ``learn`` reports its time per update and the projected run time, and warns
        before a long CPU run of a large network (:func:`~delayzoo.agents.common.run_time.report_first_update`).
        """
        if len(self.replay_buffer) == 0:
            return
        wall, cpu = time.perf_counter(), time.process_time()
        self._train_round(gradient_steps, batch_size)
        if self._projection_due:
            self._projection_due = False
            report_first_update(
                self, (time.perf_counter() - wall) / gradient_steps, (time.process_time() - cpu) / gradient_steps,
                sum(p.numel() for p in self.policy.network.parameters()),
                "DelayedEZ at EfficientZero's size is meant for a GPU; on a CPU use a smaller network "
                "(policy_kwargs, e.g. the CartPole-v1 entry of hyperparams/delayed_ez.yml) or fewer steps",
                later_updates=self._final_updates_left(),
            )

    def _round_batches(
        self, gradient_steps: int, batch_size: int
    ) -> tuple[list[ReplayBatch], list[Targets], ReanalysisCounts]:
        """This round's batches, their targets and what the reanalysis did (from the reanalysis actors, or
        :class:`RoundTargets`)."""
        beta = self.replay_config.beta(self._current_progress_remaining)

        def sample() -> ReplayBatch:
            return self.replay_buffer.sample(batch_size, self.target_config, self._rng, beta)

        if self._actors is not None and self._actors.reanalysis:
            return self._actors.next_round(self, sample, gradient_steps)
        reanalysis = self._reanalysis()
        return self._round_targets.next(reanalysis, sample, gradient_steps, batch_size, self._rng, self.prefetch)

    def _train_round(self, gradient_steps: int, batch_size: int) -> None:
        self.policy.set_training_mode(True)
        config = UpdateConfig(
            self.frame_stack, self.num_unroll_steps, self.lstm_horizon,
            LossCoefficients(self.value_loss_coef, self.reward_loss_coef, self.policy_loss_coef,
                             self.consistency_loss_coef),
            self.max_grad_norm, self.augment,
        )
        logs: dict[str, list[float]] = defaultdict(list)
        batches, round_targets, counts = self._round_batches(gradient_steps, batch_size)
        for batch, targets in zip(batches, round_targets):
            logged, priorities = update_on_batch(
                self.policy, self._grad_scaler, batch, targets, config,
                learning_rate(self.lr_schedule(self._current_progress_remaining), self._n_updates,
                              self.lr_warmup_steps, self.lr_decay_steps, self.lr_decay_rate),
            )
            self._n_updates += 1
            self.replay_buffer.update_priorities(batch.slots, batch.ids, priorities)
            refresh = self._n_updates % self.target_update_interval == 0
            if refresh:
                self._round_targets.wait()  # its targets come from the target network before the refresh
                self.policy.refresh_target()
                self._round_targets.refreshed()
            if self._actors is not None:
                self._actors.updated(self, refresh)
            for name, value in zip(LOGGED_LOSSES, logged.tolist()):
                logs[name].append(value)  # one device-to-host transfer for the five numbers
        self.policy.set_training_mode(False)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/learning_rate", self.policy.optimizer.param_groups[0]["lr"])
        for key, values in logs.items():
            self.logger.record(f"train/{key}", float(np.mean(values)))
        counts.record(self.logger, self.consistency_filter)
