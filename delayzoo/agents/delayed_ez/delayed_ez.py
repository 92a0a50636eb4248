"""DelayedEZ: EfficientZero under stochastic execution delay, on Stable-Baselines3's ``OffPolicyAlgorithm``.

One training iteration, top to bottom (SB3's ``learn`` loop calls these):

1. :meth:`DelayedEZ._sample_action`: one batched search for all envs (from the forecast roots under
   delay) picks the actions, and each env's :class:`~delayzoo.agents.delayed_ez.replay.GameWriter`
   pairs the search policy with the observation it was rooted at;
2. :meth:`DelayedEZ._store_transition`: the writers store the executed (or decided) action, the
   learning reward (clipped if asked) and the newest frame;
3. every ``train_freq`` steps, :meth:`DelayedEZ.train`: sample ``gradient_steps`` batches with
   priorities, bootstrap their n-step values with the target network and reanalyse a fraction of
   their policy targets in one batched search, then run the ``gradient_steps`` updates of
   EfficientZero's unrolled loss (:mod:`~delayzoo.agents.delayed_ez.losses`).
"""

from __future__ import annotations

import io
import numbers
import pathlib
import time
import warnings
from collections import defaultdict
from typing import Any, ClassVar, TypeVar

import gymnasium as gym
import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, RolloutReturn, Schedule, TrainFreq
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from delayzoo.agents.common.checks import (
    check_finite_step,
    check_gradient_steps,
    check_learning_rate,
    check_number,
    check_train_freq,
    warn_if_no_update,
)
from delayzoo.agents.common.plain_save import PlainSaveMixin, UnsuitableEnvError
from delayzoo.agents.common.precision import grad_scaler
from delayzoo.agents.common.replay_files import ReplayFileError, check_array, read_replay_file, save_replay_file
from delayzoo.agents.common.run_time import report_first_update
from delayzoo.agents.delayed_ez.config import GUMBEL_FIELDS, SearchConfig, TargetConfig
from delayzoo.agents.delayed_ez.distributed import ActorConfig, ActorRun, actor_env_factory
from delayzoo.agents.delayed_ez.losses import LossCoefficients, random_intensity, random_shift, unroll_losses
from delayzoo.agents.delayed_ez.policies import CnnPolicy, DelayedEZPolicy, MlpPolicy, MultiInputPolicy
from delayzoo.agents.delayed_ez.reanalysis import (
    ProcessPrefetch,
    ReanalysisWorker,
    Targets,
    ThreadPrefetch,
    batch_stacks,
    compute_targets,
)
from delayzoo.agents.delayed_ez.replay import GameWriter, PrioritizedGameBuffer, ReplayBatch
from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation
from delayzoo.wrappers.atari import FrameStack

__all__ = ["DelayedEZ"]

SelfDelayedEZ = TypeVar("SelfDelayedEZ", bound="DelayedEZ")

REPLAY_ACTIONS = ("executed", "decided")
FORECAST_POLICIES = ("reanalyse", "store")
AUGMENT_SHIFT = 4  # pixels of ``augment``'s random shift: EfficientZero's, for its 96 x 96 frames


def _check_hyperparameters(values: dict[str, Any]) -> None:
    """Range checks of the constructor's numeric arguments (``values``: its ``locals()``), before anything is built."""
    check_learning_rate(values["learning_rate"])
    for name, low in (
        ("buffer_size", 1), ("learning_starts", 0), ("batch_size", 1), ("num_simulations", 1),
        ("num_unroll_steps", 1), ("td_steps", 1), ("target_update_interval", 1), ("lstm_horizon", 1),
        ("segment_length", 1), ("lr_warmup_steps", 0), ("final_updates", 0), ("stats_window_size", 1),
    ):
        check_number(name, values[name], low, integer=True)
    check_train_freq(values["train_freq"])
    check_gradient_steps(values["gradient_steps"])
    for name in ("auto_td_period", "lr_decay_steps", "reanalysis_chunk"):
        check_number(name, values[name], 1, integer=True, optional=True)
    for name in ("reanalyze_ratio", "gamma", "exploration_fraction", "priority_beta", "lr_decay_rate"):
        check_number(name, values[name], 0, 1)
    for name in ("pb_c_base", "dirichlet_alpha", "max_grad_norm"):
        check_number(name, values[name], 0, low_open=True)
    check_number("visit_temperature", values["visit_temperature"], 0, low_open=True, optional=True)
    for name in ("pb_c_init", "priority_alpha", "value_loss_coef", "reward_loss_coef", "policy_loss_coef",
                 "consistency_loss_coef"):
        check_number(name, values[name], 0)


_FLAT_SEARCH_KEYWORDS = {
    "num_simulations": "num_simulations", "discount": "gamma", "pb_c_base": "pb_c_base", "pb_c_init": "pb_c_init",
    "dirichlet_alpha": "dirichlet_alpha", "exploration_fraction": "exploration_fraction",
    "lstm_horizon": "lstm_horizon", "gamma": "gamma",
}
"""Search settings that are DelayedEZ's own keywords (``search_kwargs`` key -> the keyword to use)."""


def _check_search_kwargs(search_kwargs: Any) -> dict[str, Any]:
    """``search_kwargs`` as a new dict of :data:`~delayzoo.agents.delayed_ez.config.GUMBEL_FIELDS` (values are
    checked by :class:`SearchConfig`)."""
    if search_kwargs is None:
        return {}
    if not isinstance(search_kwargs, dict):
        raise TypeError(f"search_kwargs must be a dict or None, got {search_kwargs!r}")
    for key in search_kwargs:
        if key in _FLAT_SEARCH_KEYWORDS:
            raise ValueError(
                f"search_kwargs may not hold {key!r}: pass it as DelayedEZ({_FLAT_SEARCH_KEYWORDS[key]}=...)"
            )
        if key not in GUMBEL_FIELDS:
            raise ValueError(f"search_kwargs has an unknown key {key!r}; its keys are {GUMBEL_FIELDS}")
    return dict(search_kwargs)


def _check_clip_reward(value: Any) -> bool | float:
    if isinstance(value, (bool, np.bool_)) or value is None:
        return bool(value)
    if not isinstance(value, numbers.Real):
        raise TypeError(f"clip_reward must be a bool or a non-negative number, got {value!r}")
    if not value >= 0:
        raise ValueError(f"clip_reward must be a bool or a non-negative number, got {value!r}")
    return float(value)


class DelayedEZ(PlainSaveMixin, OffPolicyAlgorithm):
    """EfficientZero with a forward model over the pending actions (Delayed-EZ, ICLR 2024).

    >>> import gymnasium as gym
    >>> from delayzoo.wrappers import ExecutionDelay, RandomWalkDelay, PendingActionsObservation
    >>> env = PendingActionsObservation(ExecutionDelay(gym.make("CartPole-v1"), RandomWalkDelay(5)))
    >>> model = DelayedEZ("MultiInputPolicy", env).learn(30_000)  # doctest: +SKIP

    Optimiser: SGD with momentum 0.9 and weight decay 1e-4 at 0.2, linear warm-up over
    ``lr_warmup_steps`` updates, then x``lr_decay_rate`` every ``lr_decay_steps`` updates
    (EfficientZero's Atari schedule); Adam can be chosen with
    ``policy_kwargs=dict(optimizer_class=torch.optim.Adam)`` (our CartPole settings do).

    Differences from EfficientZero and the Delayed-EZ reference code, and why:

    - the two bugs that stop the reference from running a delay experiment (an attribute that does not
      exist and a queue that is popped but never filled) are fixed; delays come from the env's
      ``ExecutionDelay`` and reach the agent through ``PendingActionsObservation``;
    - by default acting, storing and updating alternate in one process (SB3's loop, ``train_freq`` /
      ``gradient_steps``); with ``self_play_actors`` / ``reanalysis_actors`` they run on Ray actors as in
      EZ, but self-play is throttled to the in-process replay ratio (EZ: to the share of training done),
      the learner samples the batches itself (EZ: CPU batch workers), and segments reach the replay when
      they are finished (:mod:`~delayzoo.agents.delayed_ez.distributed`); ``final_updates`` adds EZ's
      updates after the last env step;
    - the ``gradient_steps`` batches of a round are sampled together and reanalysed in one batched search
      with the target network of the start of the round (EZ reanalyses each batch in its own worker
      with a target network refreshed every 200 updates: the same staleness order);
    - the replay stores frames once and rebuilds the stacks at sample time (EZ keeps JPEG-compressed
      stacks per game); priorities of new data are the maximum of the current priorities, as in EZ;
    - sampling is with replacement over transitions (EZ: without replacement within a batch);
    - the search's tie-breaks are seeded (EZ's tree reseeds from the clock), so runs are reproducible;
    - latent min-max normalisation is off for the conv network (as EZ's Atari model) and on for the
      vector network we add for non-image observations (it keeps the small residual MLP bounded);
    - policy targets are paired with the observation the search was rooted at (the forecast step under
      delay); the reference pairs them with the decision step. ``forecast_policy="reanalyse"`` (an option,
      not yet shown better) stores no forecast visits and reanalyses every observation without a search
      rooted at it, as the reference's learner effectively does (99% reanalysed): on a trained model the
      search from the rolled latent picks the action of the search from the reached state's encoding only
      40-68% of the time (``benchmarks/dez_forward_roll.py``); without delay both train the same;
    - the value-prefix LSTM's output keeps EfficientZero's batch norm, which in training normalises each
      unroll step with its own statistics but in the search with running statistics that mix the steps:
      on a trained CartPole model the first step's output has a tenth of the running variance, and its
      mean value prefix over 512 states reads 0.25 in the search against 1.35 with the step's own
      statistics. ``net_kwargs=dict(value_prefix_norm="layer")`` (an option, not shown better) uses layer
      norm there instead: CartPole, no delay, 20k steps, seeds 0 / 1 / 2 gave 118.4 / 271.1 / 86.6 against
      366.5 / 231.8 / 9.9 (``benchmarks/dez_delay_learning.py``, 2026-12-03);
    - the Oblivious-EZ baseline (``forward_model=False``) stores the agent's decided actions, as the
      paper's; ``replay_actions="executed"`` gives it the executed ones (a stronger baseline);
    - rewards are clipped for learning only when ``clip_reward`` is set (the Atari entry of the zoo sets
      it, as EZ does); scores in the logs are always the env's;
    - the consistency targets of all ``K`` unroll steps are encoded in one call on ``B x K``
      observations (EZ: one call per step on ``B``), so in training mode their BatchNorm statistics
      are taken over the ``K`` steps together and the running statistics move once per update instead
      of ``K`` times (one call: fewer, larger ops; not yet measured against the per-step form);
    - the search from the forecast root starts with a fresh value-prefix LSTM state (the reference
      carries over the state of the forecast roll, which was never trained to start mid-sequence);
    - under delay, each env draws its own delay path and its initial queue holds ``init_action``
      fillers (the reference shares one walk across envs and plans its initial queue with M searches),
      and a lost life keeps the actions in flight (the reference clears and refills the queue at every
      life loss, although the game goes on);
    - mixed precision (``policy_kwargs=dict(mixed_precision=True)``) is off by default (the reference runs
      ``--amp_type torch_amp``, float16 autocast with a gradient scaler, by default); on a GPU it is the
      reference's, on a CPU it is bfloat16 (no scaler), and it covers acting and reanalysis as well as the
      updates, with the losses and the value transforms taken in float32;
    - ``search_kwargs=dict(method="gumbel")`` (an option; the paper's pUCT stays the default) searches as
      EfficientZero V2 (Wang et al., ICML 2024) by Gumbel MuZero's method (Danihelka et al., ICLR 2022):
      Gumbel-top-k root actions, sequential halving, completed Q with the mixed value, and the improved
      policy as the policy target, without Dirichlet noise or visit temperature; ``q_normalization=
      "parent_siblings"`` (both searches) normalises Q per node as mctx does instead of over the whole tree;
    - with ``use_root_value`` the search that gives the bootstrap root values (with root noise, as EZ's) runs
      for every bootstrap observation of the round, also past an episode end where its value is not used,
      in the same prefetch or actor as the rest of the targets.

    :param policy: "CnnPolicy", "MlpPolicy", "MultiInputPolicy" or a :class:`DelayedEZPolicy` subclass
    :param env: env or VecEnv (all envs act through one batched search); under delay it must
        expose the queue through ``PendingActionsObservation``
    :param learning_rate: peak learning rate (constant or schedule of the remaining progress)
    :param buffer_size: transitions kept in the replay
    :param learning_starts: env steps before the first update
    :param batch_size: samples per update
    :param num_simulations: MCTS simulations per decision
    :param num_unroll_steps: model unroll steps per sample (K)
    :param td_steps: n of the n-step value targets
    :param reanalyze_ratio: fraction of each batch whose policy targets are recomputed by a search with
        the target network
    :param use_root_value: the n-step value targets bootstrap from the root value of a search with the
        target network at the bootstrap observation instead of its predicted value (EfficientZero's
        ``--use_root_value``, off there too): one more search per value target, so reanalysis costs
        about twice as much
    :param forward_model: roll the dynamics through the pending actions before searching (False: the
        paper's delay-oblivious baseline, Oblivious-EZ)
    :param replay_actions: the action stored for the model: ``"executed"`` (by the env, the undelayed
        MDP) or ``"decided"`` (by the agent); ``None``: executed with the forward model, decided without
    :param forecast_policy: what becomes of the visits of a search rooted at a forecast state (under delay,
        with the forward model): ``"store"``: they are stored as the policy target of the observation at
        ``t + d_t``; ``"reanalyse"``: they only pick the action, and the policy target of every observation
        without a search rooted at it is recomputed by a search from that observation (the learner sees the
        targets of the undelayed MDP, as the reference's, which reanalyses 99%). Without delay every search
        is rooted at the observation, so both train the same
    :param clip_reward: rewards used for learning: ``True`` their sign (EfficientZero on Atari), a number
        ``c > 0`` clips them to ``[-c, c]``, ``False`` or 0 keeps them
    :param frame_stack: frames stacked channels-first in each observation, stored once each by the
        replay; ``None`` reads it from the env's :class:`~delayzoo.wrappers.atari.FrameStack` (1 without)
    :param gamma: discount
    :param train_freq: update every ``train_freq`` env steps (per env), or ``(n, "episode")``
    :param gradient_steps: updates per round; -1: as many as env steps collected in the round (SB3's meaning)
    :param target_update_interval: updates between target-network refreshes
    :param lstm_horizon: value-prefix LSTM reset period (in model steps)
    :param pb_c_base: pUCT c2
    :param pb_c_init: pUCT c1
    :param dirichlet_alpha: pUCT's root noise concentration
    :param exploration_fraction: pUCT's root noise weight
    :param search_kwargs: the search method and its settings, fields of
        :class:`~delayzoo.agents.delayed_ez.config.SearchConfig` other than the keywords above: ``method``
        (``"puct"``, the paper's, or ``"gumbel"``, EfficientZero V2's), ``num_considered_actions``,
        ``gumbel_scale``, ``c_visit``, ``c_scale``, ``q_normalization`` (``"tree"`` or ``"parent_siblings"``);
        e.g. ``dict(method="gumbel")``. Under Gumbel there is no Dirichlet noise and no visit temperature
    :param priority_alpha: priority exponent
    :param priority_beta: initial importance-sampling exponent, annealed to 1 over training
    :param auto_td_period: adaptive horizon: ``td_steps`` shrinks by one per this many transitions of
        age (None: fixed horizon)
    :param segment_length: episodes are stored as segments of at most this many transitions
    :param lr_warmup_steps: updates of linear learning-rate warm-up
    :param lr_decay_steps: after the warm-up, the learning rate is multiplied by ``lr_decay_rate`` every
        this many updates (None: no decay)
    :param lr_decay_rate: the decay factor (EfficientZero: 0.1)
    :param final_updates: updates run after the last env step of ``learn`` (EfficientZero trains 20k
        more updates after collecting its 100k steps); none when the run makes no update (``learning_starts``
        at or past its last step)
    :param max_grad_norm: gradient clipping
    :param value_loss_coef: value loss weight (EfficientZero: 0.25)
    :param reward_loss_coef: value-prefix loss weight (1)
    :param policy_loss_coef: policy loss weight (1)
    :param consistency_loss_coef: SimSiam consistency loss weight (2)
    :param augment: random shifts (``AUGMENT_SHIFT`` = 4 pixels) and intensity changes of image observations
        during training (EfficientZero's); a warning says when the frames are too small for the shift
    :param visit_temperature: pUCT: actions are sampled from ``visits^(1/T)`` while training; ``None`` follows
        EfficientZero (T = 1, then 0.5 after half of training, 0.25 after three quarters)
    :param reanalysis_chunk: roots per reanalysis search; ``None``: all roots of a round in one search on
        a GPU, 1024 per search on a CPU
    :param prefetch: sample the next round's batches at the end of each round and compute their value and
        policy targets while this round's updates run; those batches then miss this round's priority
        updates and the env steps in between. ``True``: in a background thread (the tree and torch release
        the GIL, but at small network sizes the two threads mostly take turns); ``"process"`` (CPU only):
        in a worker process (one torch thread) with its own copy of the target network, which overlaps
        for real on a multi-core CPU at the cost of one more process; ``False``: in the update. The
        thread and the process give the same training (the same targets from the same random stream).
    :param self_play_actors: Ray actors that act, each with ``envs_per_actor`` envs of its own and a copy
        of the network (0: acting in this process); ``env`` may then be an env id or a picklable function
        returning a new env. A run setting, not saved: pass it to ``load`` again to keep using actors
    :param reanalysis_actors: Ray actors that compute the targets of the batches this process samples, one
        round in flight per actor (0: here, or by ``prefetch``, which is not used with them); a run setting
    :param ray_address: the Ray cluster: ``None`` (a local Ray, or the one this process is connected to),
        ``"auto"``, ``HOST:PORT`` or ``ray://HOST:PORT``; a run setting
    :param envs_per_actor: envs of each self-play actor (the reference's ``p_mcts_num``); ``n_envs`` is then
        ``self_play_actors * envs_per_actor``
    :param self_play_update_interval: updates between weight copies to the self-play actors (reference: 100);
        the reanalysis actors get the target network at every refresh
    :param self_play_resources: Ray resources of a self-play actor, ``dict(num_cpus=..., num_gpus=...)``
        (``None``: 0.25 CPU, so actors find room beside sweep cells)
    :param reanalysis_resources: the same for a reanalysis actor (``None``: 0.25 CPU, plus 0.05 GPU where
        the cluster has GPUs)
    :param actor_max_restarts: Ray restarts of a dead actor and retries of a failed call; when they run out
        the actor's error stops ``learn``
    :param placement_timeout: seconds to wait for the actors to be placed before ``learn`` stops, naming
        the resources they asked for
    :param policy_kwargs: keywords of the policy (``net_kwargs`` for the network sizes, the optimizer,
        ``mixed_precision``: see :class:`~delayzoo.agents.delayed_ez.policies.DelayedEZPolicy`)
    :param stats_window_size: episodes averaged in the logs
    :param tensorboard_log: tensorboard log folder
    :param verbose: 0 silent, 1 info, 2 debug
    :param seed: seed of everything (envs, torch, replay sampling, search)
    :param device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``... (a CUDA device torch does not see
        is a ``ValueError``)
    :param _init_setup_model: build the networks now (``load`` builds them later)
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "CnnPolicy": CnnPolicy,
        "MlpPolicy": MlpPolicy,
        "MultiInputPolicy": MultiInputPolicy,
    }
    policy: DelayedEZPolicy
    replay_buffer: PrioritizedGameBuffer  # type: ignore[assignment]
    run_settings: ClassVar[tuple[str, ...]] = (
        "self_play_actors", "reanalysis_actors", "ray_address", "envs_per_actor", "self_play_update_interval",
        "self_play_resources", "reanalysis_resources", "actor_max_restarts", "placement_timeout",
    )

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
        pb_c_base: float = 19652.0,
        pb_c_init: float = 1.25,
        dirichlet_alpha: float = 0.3,
        exploration_fraction: float = 0.25,
        search_kwargs: dict[str, Any] | None = None,
        priority_alpha: float = 0.6,
        priority_beta: float = 0.4,
        auto_td_period: int | None = 30_000,
        segment_length: int = 200,
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
        visit_temperature: float | None = None,
        reanalysis_chunk: int | None = None,
        prefetch: bool | str = True,
        self_play_actors: int = 0,
        reanalysis_actors: int = 0,
        ray_address: str | None = None,
        envs_per_actor: int = 1,
        self_play_update_interval: int = 100,
        self_play_resources: dict[str, float] | None = None,
        reanalysis_resources: dict[str, float] | None = None,
        actor_max_restarts: int = 3,
        placement_timeout: float = 120.0,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        _check_hyperparameters(locals())
        self._env_source = env  # what self-play actors rebuild their envs from
        if callable(env) and not isinstance(env, (gym.Env, VecEnv)):
            env = env()  # an env factory: one env here, for the spaces and the checks
        if env is not None and not isinstance(env, str):
            self._check_action_space(env.action_space)
        super().__init__(
            policy,
            env,
            learning_rate,
            buffer_size=buffer_size,
            learning_starts=learning_starts,
            batch_size=batch_size,
            gamma=gamma,
            train_freq=train_freq,
            gradient_steps=gradient_steps,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
            sde_support=False,
        )
        self.num_simulations = num_simulations
        self.num_unroll_steps = num_unroll_steps
        self.td_steps = td_steps
        self.reanalyze_ratio = reanalyze_ratio
        self.use_root_value = use_root_value
        self.forward_model = forward_model
        if replay_actions is None:
            replay_actions = "executed" if forward_model else "decided"
        if replay_actions not in REPLAY_ACTIONS:
            raise ValueError(f"replay_actions must be one of {REPLAY_ACTIONS} or None, got {replay_actions!r}")
        self.replay_actions = replay_actions
        if forecast_policy not in FORECAST_POLICIES:
            raise ValueError(f"forecast_policy must be one of {FORECAST_POLICIES}, got {forecast_policy!r}")
        self.forecast_policy = forecast_policy
        self.clip_reward = _check_clip_reward(clip_reward)
        if frame_stack is not None and (isinstance(frame_stack, bool) or not isinstance(frame_stack, numbers.Integral)):
            raise TypeError(f"frame_stack must be an integer >= 1 or None, got {frame_stack!r}")
        if frame_stack is not None and frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        self.frame_stack = frame_stack
        self.target_update_interval = target_update_interval
        self.lstm_horizon = lstm_horizon
        self.pb_c_base = pb_c_base
        self.pb_c_init = pb_c_init
        self.dirichlet_alpha = dirichlet_alpha
        self.exploration_fraction = exploration_fraction
        self.search_kwargs = _check_search_kwargs(search_kwargs)
        self.priority_alpha = priority_alpha
        self.priority_beta = priority_beta
        self.auto_td_period = auto_td_period
        self.segment_length = segment_length
        self.lr_warmup_steps = lr_warmup_steps
        self.lr_decay_steps = lr_decay_steps
        self.lr_decay_rate = lr_decay_rate
        self.final_updates = final_updates
        self.max_grad_norm = max_grad_norm
        self.value_loss_coef = value_loss_coef
        self.reward_loss_coef = reward_loss_coef
        self.policy_loss_coef = policy_loss_coef
        self.consistency_loss_coef = consistency_loss_coef
        self.augment = augment
        self.visit_temperature = visit_temperature
        self.reanalysis_chunk = reanalysis_chunk
        if not isinstance(prefetch, (bool, np.bool_)) and prefetch != "process":
            raise ValueError(f"prefetch must be True, False or 'process', got {prefetch!r}")
        if prefetch == "process" and self.device.type != "cpu":
            raise ValueError(
                f"prefetch='process' reanalyses in a CPU worker process, but the model is on {self.device}; "
                "use prefetch=True there"
            )
        self.prefetch = prefetch if prefetch == "process" else bool(prefetch)
        self.self_play_actors = self_play_actors
        self.reanalysis_actors = reanalysis_actors
        self.ray_address = ray_address
        self.envs_per_actor = envs_per_actor
        self.self_play_update_interval = self_play_update_interval
        self.self_play_resources = self_play_resources
        self.reanalysis_resources = reanalysis_resources
        self.actor_max_restarts = actor_max_restarts
        self.placement_timeout = placement_timeout
        self._actors: ActorRun | None = None
        actor_config = self._actor_config()
        actor_config.check_ray()
        if actor_config.self_play_actors:
            actor_env_factory(self._env_source)  # a ValueError now for an env the actors cannot rebuild
        self._prefetched: ThreadPrefetch | ProcessPrefetch | None = None
        self._worker: ReanalysisWorker | None = None
        self._worker_stale = True
        self._projection_due = False  # set by each learn: its first round reports the run time
        self._final_updates_done = 0
        self._writers: list[GameWriter] | None = None
        self._build_configs()
        if self.env is not None:
            self._check_env(self.env)
        if _init_setup_model:
            self._setup_model()

    # ----------------------------------------------------------------- setup
    @staticmethod
    def _check_action_space(action_space: spaces.Space) -> None:
        if not isinstance(action_space, spaces.Discrete):
            raise ValueError(
                f"DelayedEZ plans over a finite action set and needs a Discrete action space, got {action_space}; "
                "use PWM for continuous actions"
            )
        if int(action_space.start) != 0:
            raise ValueError(f"DelayedEZ needs a Discrete action space starting at 0, got start={action_space.start}")

    def _build_configs(self) -> None:
        """The search and target configurations, from the attributes of the same names."""
        self.search_config = SearchConfig(
            num_simulations=self.num_simulations,
            discount=self.gamma,
            pb_c_base=self.pb_c_base,
            pb_c_init=self.pb_c_init,
            dirichlet_alpha=self.dirichlet_alpha,
            exploration_fraction=self.exploration_fraction,
            lstm_horizon=self.lstm_horizon,
            **self.search_kwargs,
        )
        self.target_config = TargetConfig(
            num_unroll_steps=self.num_unroll_steps,
            td_steps=self.td_steps,
            discount=self.gamma,
            lstm_horizon=self.lstm_horizon,
            reanalyze_ratio=self.reanalyze_ratio,
            auto_td_period=self.auto_td_period,
            use_root_value=self.use_root_value,
        )

    def _check_env(self, env: VecEnv) -> None:
        """Refuse an env DelayedEZ cannot train on: an observation delay, an execution delay it cannot see, frames
        stacked other than ``frame_stack`` says (constructor, ``set_env`` and ``load`` alike)."""
        self._check_action_space(self.action_space)
        if any(env.env_is_wrapped(ObservationDelay)):
            raise UnsuitableEnvError(
                env,
                "DelayedEZ does not handle an ObservationDelay: its forward model rolls only through the queued "
                "actions of an ExecutionDelay; train an SB3 algorithm on "
                "PendingActionsObservation(ObservationDelay(env, delay)) instead",
            )
        delayed = env.env_is_wrapped(ExecutionDelay)
        with_view = env.env_is_wrapped(PendingActionsObservation)
        if any(d and not v for d, v in zip(delayed, with_view)):
            raise UnsuitableEnvError(
                env,
                "it has an ExecutionDelay but the agent cannot see the pending actions; wrap it as "
                "PendingActionsObservation(ExecutionDelay(env, delay)) and use 'MultiInputPolicy'",
            )
        stacked = env.env_is_wrapped(FrameStack)
        found = int(env.get_attr("num_frames")[0]) if all(stacked) else 1
        if self.frame_stack is None:
            self.frame_stack = found
        elif any(stacked) and self.frame_stack != found:
            raise UnsuitableEnvError(env, f"frame_stack={self.frame_stack} but it stacks {found} frames (FrameStack)")

    def _setup_model(self) -> None:
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self._convert_train_freq()
        self._build_configs()
        if self.frame_stack is None:
            self.frame_stack = 1
        self.policy = self.policy_class(
            self.observation_space,
            self.action_space,
            self.lr_schedule,
            search_config=self.search_config,
            forward_model=self.forward_model,
            seed=self.seed,
            **self.policy_kwargs,
        )
        self.policy = self.policy.to(self.device)
        self._warn_if_augment_distorts()
        self._grad_scaler = grad_scaler(self.device, self.policy.mixed_precision)
        self.replay_buffer = PrioritizedGameBuffer(self.buffer_size, self.priority_alpha, frame_stack=self.frame_stack)
        self._rng = np.random.default_rng(self.seed)
        self._writers = None

    def _warn_if_augment_distorts(self) -> None:
        """Warn when ``augment``'s shift is a large part of the frame (it is sized for 96 x 96 Atari frames)."""
        network = self.policy.network
        if not (self.augment and network.image):
            return
        side = min(network.observation_shape[1:])
        if side < 10 * AUGMENT_SHIFT:
            warnings.warn(
                f"augment=True shifts the {side}-pixel frames by up to {AUGMENT_SHIFT} pixels (EfficientZero's "
                "shift, for 96-pixel frames), with the borders replicated; on MinAtar's 10 x 10 frames that kept "
                "DelayedEZ at random play: pass augment=False for small frames",
                stacklevel=3,
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
        passed again (``load(path, env, self_play_actors=2, ...)``); ``env`` may then be an env id or a
        picklable env factory, as for the constructor.
        """
        source = env
        if isinstance(env, str):
            env = gym.make(env)
        elif callable(env) and not isinstance(env, (gym.Env, VecEnv)):
            env = env()
        model = super().load(path, env, device, custom_objects, print_system_info, force_reset, **kwargs)
        if source is not None:
            model._env_source = source
        model._actor_config().check_ray()  # checks actor settings passed as keywords
        return model

    def set_parameters(
        self, load_path_or_dict: Any, exact_match: bool = True, device: torch.device | str = "auto"
    ) -> None:
        """SB3's ``set_parameters``; a reanalysis worker gets the new target network with its next batches."""
        super().set_parameters(load_path_or_dict, exact_match, device)
        self._worker_stale = True

    # ----------------------------------------------------------------- replay buffer I/O
    def save_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:
        """Save the replay buffer, with the running episodes' transitions, as plain arrays (``.npz``, no pickle).

        :param path: file path or writable binary file
        """
        if self.replay_buffer is None:
            raise ValueError("the replay buffer is not defined")
        running = [segment for writer in self._writers or [] if (segment := writer.unfinished()) is not None]
        save_replay_file(path, "DelayedEZ", self.replay_buffer.state_arrays(running))

    def load_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase, truncate_last_traj: bool = True) -> None:
        """Load a replay buffer saved by :meth:`save_replay_buffer` for this model's spaces (never unpickles).

        Episodes that were running when it was saved come back as cut segments (bootstrapped at their
        last observation); the live env does not continue them, so ``truncate_last_traj`` has nothing
        more to do (it is accepted for SB3's signature). The whole file is read and checked first: the
        model is left unchanged when it is refused.

        :param path: file path or readable binary file
        :param truncate_last_traj: accepted for compatibility with SB3's ``load_replay_buffer``
        :raises ReplayFileError: (a ``ValueError``) naming the file, when it is not a complete buffer of
            DelayedEZ or its frames, frame stack or actions do not fit the model's spaces
        """
        arrays = read_replay_file(path, "DelayedEZ")
        self._check_buffer_file(path, arrays)
        buffer = PrioritizedGameBuffer.from_arrays(arrays, path)
        self._drop_prefetched()
        self.replay_buffer = buffer

    def _check_buffer_file(self, path: Any, arrays: dict[str, np.ndarray]) -> None:
        """Refuse a saved buffer whose frame stack, observations or action count differ from the model's."""
        observation = self.observation_space
        if isinstance(observation, spaces.Dict):
            observation = observation["observation"]
        expected = tuple(observation.shape)
        frame_stack = int(check_array(path, arrays, "frame_stack", (), "iu"))
        if frame_stack != self.frame_stack:
            raise ReplayFileError(path, f"it stacks {frame_stack} frames, the model {self.frame_stack}")
        if len(check_array(path, arrays, "lengths", None, "iu")) == 0:
            return
        frames = check_array(path, arrays, "frames", None, "iuf")
        policies = check_array(path, arrays, "policies", None, "f")
        stacked = (frame_stack * frames.shape[1], *frames.shape[2:]) if frames.ndim >= 2 else frames.shape
        if stacked != expected:
            raise ReplayFileError(path, f"it holds observations of shape {stacked}, the model takes {expected}")
        if policies.ndim != 2 or policies.shape[1] != self.action_space.n:
            width = policies.shape[1] if policies.ndim == 2 else policies.shape
            raise ReplayFileError(
                path, f"it holds policies over {width} actions, the model has {self.action_space.n}"
            )

    # ----------------------------------------------------------------- acting and storing
    @staticmethod
    def _observation_part(obs: Any) -> np.ndarray:
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
            self._writers = None  # the self-play actors write the segments
        elif self._writers is None or reset_num_timesteps or len(self._writers) != self.n_envs:
            check_finite_step(self.num_timesteps, self._last_obs)
            num_actions = int(self.action_space.n)
            self._writers = [GameWriter(num_actions, self.segment_length, self.frame_stack) for _ in range(self.n_envs)]
            first = self._observation_part(self._last_obs)
            for env_index, writer in enumerate(self._writers):
                writer.start(first[env_index])
        return result

    def _sample_action(
        self, learning_starts: int, action_noise: ActionNoise | None = None, n_envs: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        """One batched search for all envs (with root noise, from the start: its visits are policy targets)."""
        assert self._writers is not None
        decision = self.policy.act(
            obs_as_tensor(self._last_obs, self.device), deterministic=False, add_noise=True,
            temperature=self._temperature(),
        )
        for env_index, writer in enumerate(self._writers):
            offset = int(decision.root_offsets[env_index])
            if offset == 0 or self.forecast_policy == "store":
                writer.record_search(decision.policy[env_index], offset)
        return decision.actions, decision.actions

    def _learning_rewards(self, rewards: np.ndarray) -> np.ndarray:
        rewards = np.asarray(rewards, dtype=np.float64)
        if self.clip_reward is True:
            return np.sign(rewards)
        if self.clip_reward:
            return np.clip(rewards, -self.clip_reward, self.clip_reward)
        return rewards

    def _store_transition(
        self,
        replay_buffer: PrioritizedGameBuffer,  # type: ignore[override]
        buffer_action: np.ndarray,
        new_obs: Any,
        reward: np.ndarray,
        dones: np.ndarray,
        infos: list[dict[str, Any]],
    ) -> None:
        """Each env's writer takes the stored action (executed or decided), the learning reward and the newest frame."""
        assert self._writers is not None
        check_finite_step(self.num_timesteps, new_obs, reward, infos)
        rewards = self._learning_rewards(reward)
        next_part = self._observation_part(new_obs)
        for env_index, writer in enumerate(self._writers):
            info = infos[env_index]
            action = buffer_action[env_index]
            if self.replay_actions == "executed":
                action = info.get("executed_action", action)
            if dones[env_index]:
                final = self._observation_part(info["terminal_observation"])
                truncated = bool(info.get("TimeLimit.truncated", False))
                segment = writer.step(int(action), float(rewards[env_index]), final, not truncated, truncated)
            else:
                segment = writer.step(int(action), float(rewards[env_index]), next_part[env_index], False, False)
            if segment is not None:
                replay_buffer.add(segment)
            if dones[env_index]:
                writer.start(next_part[env_index])
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

        With ``self_play_actors`` or ``reanalysis_actors``, the actors are started (and Ray, if needed) for
        this call and stopped at its end, also on an error or Ctrl-C / SIGTERM.
        """
        try:
            self._start_actors()
            super().learn(
                total_timesteps=total_timesteps,
                callback=callback,
                log_interval=log_interval,
                tb_log_name=tb_log_name,
                reset_num_timesteps=reset_num_timesteps,
                progress_bar=progress_bar,
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
            self._drop_prefetched()
            self._stop_actors()
        return self

    # ----------------------------------------------------------------- actors (Ray)
    def _actor_config(self) -> ActorConfig:
        return ActorConfig(
            self_play_actors=self.self_play_actors, reanalysis_actors=self.reanalysis_actors,
            envs_per_actor=self.envs_per_actor, self_play_update_interval=self.self_play_update_interval,
            self_play_resources=self.self_play_resources, reanalysis_resources=self.reanalysis_resources,
            max_restarts=self.actor_max_restarts, placement_timeout=self.placement_timeout,
            ray_address=self.ray_address,
        )

    def _start_actors(self) -> None:
        """Place this learn's actors (see :mod:`~delayzoo.agents.delayed_ez.distributed`)."""
        config = self._actor_config()
        if not config.active:
            return
        factory = None
        if config.self_play_actors:
            if isinstance(self.train_freq, TrainFreq) and self.train_freq.unit.value != "step":
                raise ValueError(f"self-play actors need train_freq in steps, got {self.train_freq}")
            factory = actor_env_factory(self._env_source)
        if config.reanalysis_actors and self.prefetch and self.verbose >= 1:
            print(f"DelayedEZ: prefetch={self.prefetch!r} is not used: the reanalysis actors compute the targets")
        self._actors = ActorRun(self, config, factory)
        if config.self_play_actors:
            self.n_envs = config.self_play_actors * config.envs_per_actor

    def _stop_actors(self) -> None:
        if self._actors is not None:
            self._actors.close()
            self._actors = None
            if self.env is not None:
                self.n_envs = self.env.num_envs

    def _round_updates(self) -> int:
        """Updates per round of ``train_freq`` steps of every env (SB3's ``gradient_steps``, -1: one per env step)."""
        if self.gradient_steps >= 0:
            return int(self.gradient_steps)
        return int(self.train_freq.frequency) * self.n_envs  # type: ignore[union-attr]

    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        train_freq: TrainFreq,
        replay_buffer: ReplayBuffer,
        action_noise: ActionNoise | None = None,
        learning_starts: int = 0,
        log_interval: int | None = None,
    ) -> RolloutReturn:
        """SB3's ``collect_rollouts``; with self-play actors, a round of segments received from them."""
        if self._actors is not None and self._actors.self_play:
            return self._actors.collect_rollouts(self, callback, log_interval)
        return super().collect_rollouts(
            env, callback, train_freq, replay_buffer, action_noise, learning_starts, log_interval
        )

    def _final_updates_left(self) -> int:
        """``final_updates`` still to run in this ``learn``: none when the run makes no update (it ends at or
        before ``learning_starts``), since updates after the last step follow the run's own updates."""
        if self._total_timesteps <= self.learning_starts:
            return 0
        return max(self.final_updates - self._final_updates_done, 0)

    def _drop_prefetched(self) -> None:
        if self._prefetched is not None:
            self._prefetched.wait()
            self._prefetched = None

    def _learning_rate_now(self) -> float:
        """EfficientZero's schedule: linear warm-up, then x``lr_decay_rate`` every ``lr_decay_steps`` updates."""
        rate = self.lr_schedule(self._current_progress_remaining)
        if self.lr_warmup_steps > 0 and self._n_updates < self.lr_warmup_steps:
            return rate * (self._n_updates + 1) / self.lr_warmup_steps
        if self.lr_decay_steps:
            rate *= self.lr_decay_rate ** ((self._n_updates - max(self.lr_warmup_steps, 0)) // self.lr_decay_steps)
        return rate

    def _target_settings(self) -> dict[str, Any]:
        """The keywords of :func:`~delayzoo.agents.delayed_ez.reanalysis.compute_targets` that come from the
        model's settings (here, in the prefetch thread, in the worker process and in the reanalysis actors)."""
        return dict(
            frame_stack=self.frame_stack, reanalyze_ratio=self.reanalyze_ratio, chunk=self.reanalysis_chunk,
            reanalyse_missing=self.forecast_policy == "reanalyse", use_root_value=self.target_config.use_root_value,
            mixed_precision=self.policy.mixed_precision,
        )

    def _targets(self, batches: list[ReplayBatch]) -> list[Targets]:
        """The round's targets, computed here (see :func:`~delayzoo.agents.delayed_ez.reanalysis.compute_targets`)."""
        return compute_targets(
            self.policy.target_network, self.policy.mcts, batches, self._rng, device=self.device,
            **self._target_settings(),
        )

    def _start_prefetch(self, batches: list[ReplayBatch]) -> ThreadPrefetch | ProcessPrefetch:
        if self.prefetch != "process":
            return ThreadPrefetch(batches, self._targets)
        if self._worker is None:
            self._worker = ReanalysisWorker(self.policy.target_network, self.policy.mcts, self._target_settings())
            self._worker_stale = True
        weights = None
        if self._worker_stale:
            weights = {name: value.numpy() for name, value in self.policy.target_network.state_dict().items()}
            self._worker_stale = False
        return ProcessPrefetch(batches, self._worker, self._rng, weights, self.device)

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

    def _train_round(self, gradient_steps: int, batch_size: int) -> None:
        self.policy.set_training_mode(True)
        network = self.policy.network
        optimizer, scaler = self.policy.optimizer, self._grad_scaler
        coefficients = LossCoefficients(
            self.value_loss_coef, self.reward_loss_coef, self.policy_loss_coef, self.consistency_loss_coef
        )
        beta = self.priority_beta + (1.0 - self.priority_beta) * (1.0 - self._current_progress_remaining)
        prefetched, self._prefetched = self._prefetched, None
        if self._actors is not None and self._actors.reanalysis:
            batches, targets = self._actors.next_round(
                self, lambda: self.replay_buffer.sample(batch_size, self.target_config, self._rng, beta), gradient_steps
            )
        elif (
            prefetched is not None
            and len(prefetched.batches) == gradient_steps
            and len(prefetched.batches[0].slots) == batch_size
        ):
            batches, targets = prefetched.result()
        else:
            if prefetched is not None:
                prefetched.wait()
            batches = [
                self.replay_buffer.sample(batch_size, self.target_config, self._rng, beta)
                for _ in range(gradient_steps)
            ]
            targets = self._targets(batches)
        if self.prefetch and not (self._actors is not None and self._actors.reanalysis):
            upcoming = [
                self.replay_buffer.sample(batch_size, self.target_config, self._rng, beta)
                for _ in range(gradient_steps)
            ]
            self._prefetched = self._start_prefetch(upcoming)
        logs: dict[str, list[float]] = defaultdict(list)
        unroll = self.num_unroll_steps
        for batch, (target_values, target_policies, policy_mask) in zip(batches, targets):
            lr = self._learning_rate_now()
            for group in optimizer.param_groups:
                group["lr"] = lr
            stacks = batch_stacks(batch, batch.policy_offset, self.frame_stack, self.device)
            obs, target_obs = stacks[:, 0], stacks[:, 1:]
            if self.augment and network.image:
                obs = random_intensity(random_shift(obs, AUGMENT_SHIFT))
                target_obs = random_intensity(random_shift(target_obs.flatten(0, 1), AUGMENT_SHIFT)).view(
                    target_obs.shape
                )
            device = self.device
            masks = {
                "value": torch.as_tensor(batch.value_mask, device=device),
                "policy": policy_mask,
                "value_prefix": torch.as_tensor(batch.value_prefix_mask, device=device),
                "consistency": torch.as_tensor(batch.consistency_mask, device=device),
            }
            with self.policy.autocast():
                losses = unroll_losses(
                    network, obs, target_obs, torch.as_tensor(batch.actions, device=device), target_values,
                    target_policies, torch.as_tensor(batch.target_value_prefix, device=device), masks,
                    self.lstm_horizon,
                )
            weights = torch.as_tensor(batch.weights, device=device)
            loss = (weights * losses.weighted(coefficients)).mean()
            optimizer.zero_grad()
            scaler.scale(loss / unroll).backward()
            scaler.unscale_(optimizer)  # the clip sees the true gradients (a no-op without float16)
            torch.nn.utils.clip_grad_norm_(network.parameters(), self.max_grad_norm)
            scaler.step(optimizer)  # skipped when float16 gradients overflowed; the scale then shrinks
            scaler.update()
            self._n_updates += 1
            with torch.no_grad():
                predicted = network.to_scalar(losses.root_value_logits)
                priorities = (predicted - target_values[:, 0]).abs().cpu().numpy()
            self.replay_buffer.update_priorities(batch.slots, batch.ids, priorities)
            refresh = self._n_updates % self.target_update_interval == 0
            if refresh:
                if self._prefetched is not None:
                    self._prefetched.wait()  # its targets come from the target network before the refresh
                self.policy.refresh_target()
                self._worker_stale = True
            if self._actors is not None:
                self._actors.updated(self, refresh)
            names = ("value", "value_prefix", "policy", "consistency")
            logged = torch.stack([loss.detach(), *(getattr(losses, name).detach().mean() for name in names)])
            for name, value in zip(("loss", *(f"{name}_loss" for name in names)), logged.tolist()):
                logs[name].append(value)  # one device-to-host transfer for the five numbers
        self.policy.set_training_mode(False)
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        self.logger.record("train/learning_rate", optimizer.param_groups[0]["lr"])
        for key, values in logs.items():
            self.logger.record(f"train/{key}", float(np.mean(values)))
