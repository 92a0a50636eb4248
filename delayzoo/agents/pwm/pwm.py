"""PWM: the Parallel World Model agent (PaMoRL, NeurIPS 2024) with Stable-Baselines3's API."""

from __future__ import annotations

import inspect
import io
import pathlib
import time
import warnings
from collections import defaultdict
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy
from stable_baselines3.common.type_aliases import GymEnv, MaybeCallback, Schedule
from stable_baselines3.common.vec_env import VecEnv, VecTransposeImage

from delayzoo.agents.common.checks import (
    check_finite_step,
    check_gradient_steps,
    check_learning_rate,
    check_number,
    check_train_freq,
    warn_if_no_update,
)
from delayzoo.agents.common.plain_save import PlainSaveMixin, UnsuitableEnvError
from delayzoo.agents.common.run_time import report_first_update
from delayzoo.agents.pwm.arrivals import ArrivalRows
from delayzoo.agents.pwm.buffers import SequenceReplayBuffer
from delayzoo.agents.pwm.policies import _WRAP_HINT, PWMPolicy, resolve_delay_mode
from delayzoo.agents.pwm.world_model import ObservationLayout
from delayzoo.wrappers.delay import ExecutionDelay, ObservationDelay

SelfPWM = TypeVar("SelfPWM", bound="PWM")

LARGE_IMAGE_SIDE = 96
"""Images with a larger side get a warning: PWM's model and replay are sized for 64x64 frames."""


class PartClock:
    """Wall-clock and process CPU seconds of consecutive parts of an update (CUDA work synchronised).

    ``times[name] = (wall, cpu)`` for each :meth:`lap`, measured since the previous lap (or creation).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.times: dict[str, tuple[float, float]] = {}
        self._last = (time.perf_counter(), time.process_time())

    def lap(self, name: str) -> None:
        """Record the part ``name`` as the time since the previous lap."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        now = (time.perf_counter(), time.process_time())
        self.times[name] = (now[0] - self._last[0], now[1] - self._last[1])
        self._last = now


class PWM(PlainSaveMixin, OffPolicyAlgorithm):
    """Parallel World Model agent (PaMoRL): by default the paper's model, losses, optimisers and schedule.

    The world model encodes each frame alone into 32 categoricals of 32 classes (BatchNorm in the conv
    stages and on the posterior and prior logits), runs a sequence model of two cells with one
    128 x 128 matrix memory each (a data-dependent gated linear recurrence) over whole 64-step windows,
    and predicts rewards and continuation; the actor-critic learns in imagination (horizon 15) with
    lambda-returns from both the critic and the slow critic. At Atari shapes the model has the
    reference's 14,649,731 world-model and 3,422,736 agent parameters.

    One world-model update and one actor-critic update per ``train_freq`` env steps after
    ``learning_starts`` random steps (:meth:`train` reads top to bottom). Life losses
    (``info["life_loss"]``, see ``delayzoo.wrappers.LifeLossInfo``) are terminals for the
    continuation head and restart the recurrent state, while scores stay per game (``Monitor``).
    Evaluate it the same way: the zoo does; with SB3's ``evaluate_policy`` / ``EvalCallback`` use
    :mod:`delayzoo.agents.common.evaluation` (``evaluate_policy`` or ``LifeLossEpisodeStarts``).

    Execution delay (``delayzoo.wrappers.ExecutionDelay``; the agent reads the wrapper's documented
    fields and never re-implements its rule), chosen with ``delay_mode``:

    - ``"forecast"`` (the default when the observation is ``PendingActionsObservation``'s ``Dict``):
      the replay stores the env's own observation and the action the env *executed*
      (``info["executed_action"]``), so the world model, and the imagination the actor-critic learns
      in, are those of the undelayed env. To act, the posterior state of the current observation is
      rolled with the prior through that env's own ``pending_actions[:delay]`` (each env of a batch
      its own delay) and the actor picks the action from the forecast state; the recurrent state then
      advances with the action executed now. Greedy actions (``deterministic=True``) are the mode of
      the actor's policy averaged over ``forecast_samples`` sampled forecasts (a policy keyword, 16
      by default): the prior's per-categorical modes make an atypical state. With delay 0 this is
      plain PWM. Needs
      ``PendingActionsObservation(ExecutionDelay(env, delay))``.
    - ``"augmented"``: the whole ``Dict`` (observation, pending actions, delay) is the world model's
      observation and the decided actions are stored: the model must learn the delayed env, and its
      imagination cannot change the pending actions. The baseline of SB3's ``MultiInputPolicy``.
    - ``"oblivious"`` (the default without the pending view): the pending view is ignored and the
      decided actions are stored: plain PWM, unaware of the delay, the baseline of the delay papers.

    Observation delay (``delayzoo.wrappers.ObservationDelay``, alone or over an ``ExecutionDelay``): in
    forecast mode the replay stores the env steps as they arrive (``info["arrived"]``: each step's
    observation, reward and executed action, in step order), so the world model again learns the undelayed
    env. To act, the state is moved to the shown observation's step (an observation shown again moves it
    by nothing; steps that arrived unseen are imagined with prior samples and their executed actions) and
    forecast from there through the view's ``pending_actions[:obs_delay + delay]``: the unobserved actions,
    then the queued ones. The recurrent state then carries the shown observation's latent and the actions
    executed after it (``policy.state_keys``). The arrivals carry no ``info["life_loss"]``, so under an
    observation delay life losses are not marked in the replay (episode ends are). Augmented and oblivious
    modes treat the observation-delayed env as any other. Needs
    ``PendingActionsObservation(ObservationDelay(env, delay))``.

    ``benchmarks/pwm_delay_modes.py`` compares the three modes on CartPole-v1 under
    ``RandomWalkDelay(max_delay=5)`` (same seeds and budget; what was measured is in docs/delay-benchmark.md).

    Differences from the reference implementation (Wongziseoi/PaMoRL), each with its reason.

    Bugs of the reference, fixed:

    - the entropy bonus is the entropy of each imagined step's action distribution (summed over
      action dimensions), weighted like that step's policy-gradient term, instead of a tensor of the
      wrong shape broadcast against the advantages;
    - imagined steps are weighted by the *cumulative* product of predicted continuations, so steps
      after an imagined episode end stop counting (the reference weights step ``k`` by ``c_{k-1}`` alone);
    - episode returns are reported by SB3's ``Monitor`` on the base env, without the reference's
      off-by-one between rewards and episode ends;
    - continuous actions are clipped to [-1, 1] and rescaled to the ``Box`` bounds: never outside the
      action space (the reference's samples leave it, and only ``python -O`` hides the failing assert).

    Smaller fixes, because the reference's behaviour is unintended:

    - the timestep dropout inside the recurrence skips a dropped step (no decay, no write) and does not
      rescale kept steps; the reference's 1 / 0.9 rescaling turns forget gates below 0.1 negative;
    - where the next observation starts an episode (or follows a life loss), its KL term is skipped and
      imagination starts from a restarted state: the reference asks the prior to predict a post-reset
      frame from pre-reset history;
    - free bits (1 nat) clip each step's KL, then average (DreamerV3); the reference clips the batch
      mean, so once the mean is below 1 nat no step gets a KL gradient;
    - the 8-bit dead zone of the reconstruction loss compares with the stored bytes (the reference
      converts ``x / 255`` back with a truncation that can be one off).

    Differences in the computation, same model (for speed; results equal up to float rounding):

    - imagination starts from the world-model update's own pass (posterior samples and the states before
      every step of the 16 x 64 windows: 1,024 starts with features ``[z_t, h_{t-1}]``); the reference
      re-encodes the batch and reruns the window pass in eval mode after the update (1,008 starts). Ours
      therefore start from the states before the update, under the pass's dropout and BatchNorm batch
      statistics;
    - on CPU the window pass runs a fused loop over time (``scan_method="auto"``) that writes the memories
      straight into the imagination starts; the reference's odd-even scan gives the same values and is
      about twice slower there (GPUs use the parallel scan);
    - each critic runs once per update; the conv stacks use channels-last activations;
    - with ``policy_kwargs=dict(compile_update=True)`` (off by default) imagination and the actor-critic
      loss run through ``torch.compile``, with the same random draws (:mod:`~delayzoo.agents.pwm.compilation`).

    Design choices that differ (not bugs; kept because they suit SB3 users or are harmless):

    - imagined continuation is the predicted probability ``sigmoid(logit)``, not the reference's hard
      ``logit < 0`` threshold, and the weights leave ``gamma`` out (it is already in the returns);
    - the discrete actor mixes 1% uniform into its policy; actor and critic have separate AdamW
      optimisers (learning rates ``actor_lr`` / ``critic_lr``), each with its own clip of 100 (the
      reference: one optimiser, one joint clip);
    - vector observations go through a 2 x 512 MLP on symlog inputs and are reconstructed in symlog
      space (the reference's DMC proprio model: 4 x 1024 on raw inputs), so that the heads keep the
      reference's 2 x 512; ``Discrete`` / ``MultiDiscrete`` parts are one-hot; small float frames in
      [0, 1] (MinAtar's) are such a vector by default, or, with ``world_model_kwargs=dict(frames="conv")``,
      read by side-keeping convolutions with a Bernoulli reconstruction (:mod:`~delayzoo.agents.pwm.frames`),
      because the reference's image path takes 64x64 bytes and would halve 10x10 frames to 2x2;
    - the slow critic enters the critic target in every setting (the reference's DMC build leaves it
      unused);
    - the first policy step after the random warm-up starts from a fresh state; frames stay uint8 on the
      host (the reference keeps its replay on the GPU); windows never cross the replay's write position;
    - the env protocol (``make_atari``) does not reseed every episode identically, follows lives both
      ways and has no Freeway-only scripted warm-up; the budget is 100k agent steps (reference: 102k).

    Example::

        from delayzoo import PWM
        from delayzoo.wrappers import make_atari

        model = PWM("CnnPolicy", make_atari("ALE/Pong-v5"), verbose=1).learn(100_000, progress_bar=True)

    :param policy: ``"CnnPolicy"``, ``"MlpPolicy"``, ``"MultiInputPolicy"`` (all :class:`PWMPolicy`,
        which picks encoders from the observation space) or a policy class.
    :param env: the environment or its registered id.
    :param learning_rate: world-model learning rate (actor/critic rates are in ``policy_kwargs``).
    :param buffer_size: replay capacity in steps (over all envs).
    :param learning_starts: random steps before learning; at least ``sequence_length * n_envs``.
    :param batch_size: windows per update (16 in the paper).
    :param sequence_length: steps per window (64 in the paper).
    :param imagination_horizon: imagined steps per start state (15 in the paper).
    :param train_freq: update every ``train_freq`` steps (or ``(n, "episode")``).
    :param gradient_steps: world-model + actor-critic updates each time; -1: as many as env steps
        collected since the last updates (SB3's meaning).
    :param gamma: discount per agent step (0.997^4 on Atari with frame skip 4).
    :param delay_mode: ``"forecast"``, ``"augmented"`` or ``"oblivious"`` (see above); ``None``: forecast
        when the observation has the pending view, oblivious otherwise.
    :param policy_kwargs: :class:`PWMPolicy` keywords, e.g. ``world_model_kwargs=dict(seq_width=64)``.
    :param stats_window_size: episodes averaged in ``rollout/`` logs.
    :param tensorboard_log: tensorboard log folder (None: no tensorboard).
    :param verbose: 0 silent, 1 training info, 2 debug.
    :param seed: random seed.
    :param device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``... (a CUDA device torch does not see
        is a ``ValueError``)
    :param _init_setup_model: build the networks now (``load`` builds them later).

    Every numeric hyperparameter is range-checked here (``ValueError`` naming the value and the range);
    a non-finite reward or observation stops learning with a ``ValueError`` naming the step and env.
    """

    policy_aliases: ClassVar[dict[str, type[BasePolicy]]] = {
        "CnnPolicy": PWMPolicy,
        "MlpPolicy": PWMPolicy,
        "MultiInputPolicy": PWMPolicy,
    }
    policy: PWMPolicy
    replay_buffer: SequenceReplayBuffer

    def __init__(
        self,
        policy: str | type[PWMPolicy],
        env: GymEnv | str | None,
        learning_rate: float | Schedule = 1e-4,
        buffer_size: int = 100_000,
        learning_starts: int = 1024,
        batch_size: int = 16,
        sequence_length: int = 64,
        imagination_horizon: int = 15,
        train_freq: int | tuple[int, str] = 1,
        gradient_steps: int = 1,
        gamma: float = 0.997**4,
        delay_mode: str | None = None,
        policy_kwargs: dict[str, Any] | None = None,
        stats_window_size: int = 100,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: torch.device | str = "auto",
        _init_setup_model: bool = True,
    ) -> None:
        self._check_hyperparameters(
            learning_rate,
            buffer_size,
            learning_starts,
            batch_size,
            sequence_length,
            imagination_horizon,
            train_freq,
            gradient_steps,
            gamma,
            stats_window_size,
        )
        if env is not None and not isinstance(env, str):
            self._check_spaces(env.observation_space, env.action_space)
            resolve_delay_mode(delay_mode, env.observation_space)
        if "delay_mode" in (policy_kwargs or {}):
            raise TypeError("delay_mode is an argument of PWM, not a policy_kwargs key")
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
            replay_buffer_class=SequenceReplayBuffer,
            policy_kwargs=policy_kwargs,
            stats_window_size=stats_window_size,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            device=device,
            support_multi_env=True,
            seed=seed,
            sde_support=False,
        )
        self.sequence_length = sequence_length
        self.imagination_horizon = imagination_horizon
        self.delay_mode = delay_mode
        self.stats_window_size = stats_window_size
        self._policy_state: tuple[np.ndarray, ...] | None = None
        self.last_update_times: dict[str, tuple[float, float]] = {}
        self._episode_starts: np.ndarray | None = None
        self._arrivals: ArrivalRows | None = None  # forecast mode under an observation delay
        if _init_setup_model:
            self._setup_model()

    @staticmethod
    def _check_hyperparameters(
        learning_rate: float | Schedule,
        buffer_size: int,
        learning_starts: int,
        batch_size: int,
        sequence_length: int,
        imagination_horizon: int,
        train_freq: Any,
        gradient_steps: int,
        gamma: float,
        stats_window_size: int,
    ) -> None:
        check_learning_rate(learning_rate)
        check_number("buffer_size", buffer_size, 1, integer=True)
        check_number("learning_starts", learning_starts, 0, integer=True)
        check_number("batch_size", batch_size, 1, integer=True)
        check_number("sequence_length", sequence_length, 2, integer=True)
        check_number("imagination_horizon", imagination_horizon, 1, integer=True)
        check_train_freq(train_freq)
        check_gradient_steps(gradient_steps)
        check_number("gamma", gamma, 0, 1)
        check_number("stats_window_size", stats_window_size, 1, integer=True)

    @staticmethod
    def _check_spaces(observation_space: spaces.Space, action_space: spaces.Space) -> None:
        if isinstance(action_space, spaces.Box):
            bounded = np.all(np.isfinite(action_space.low)) and np.all(np.isfinite(action_space.high))
            if len(action_space.shape) != 1 or not bounded:
                raise ValueError(f"Unsupported action space {action_space}: PWM needs a bounded 1-D Box")
        elif not isinstance(action_space, spaces.Discrete) or action_space.start != 0:
            raise ValueError(
                f"Unsupported action space {action_space}: PWM takes Discrete (from 0) or a bounded 1-D Box"
            )
        ObservationLayout(observation_space)

    def _check_arguments(self) -> None:
        self._check_spaces(self.observation_space, self.action_space)
        self.delay_mode = resolve_delay_mode(self.delay_mode, self.observation_space)
        if self.env is not None:
            self._check_env(self.env)
        image_shape = ObservationLayout(self.observation_space).image_shape
        if image_shape is not None and max(image_shape[1:]) > LARGE_IMAGE_SIDE:
            warnings.warn(
                f"PWM got {image_shape[1]}x{image_shape[2]} images: its encoder, decoder and posterior grow with "
                "the image and the replay stores every frame. For Atari use delayzoo.wrappers.make_atari (64x64 "
                "RGB, as the paper); otherwise resize to 64x64 (gymnasium.wrappers.ResizeObservation)",
                stacklevel=4,
            )
        if self.sequence_length < 2:
            raise ValueError(f"sequence_length must be at least 2, got {self.sequence_length}")
        if self.imagination_horizon < 1:
            raise ValueError(f"imagination_horizon must be at least 1, got {self.imagination_horizon}")
        per_env = self.buffer_size // self.n_envs
        if self.sequence_length > per_env:
            raise ValueError(
                f"sequence_length={self.sequence_length} is larger than the {per_env} steps the replay buffer holds "
                f"per env (buffer_size={self.buffer_size}, n_envs={self.n_envs})"
            )
        norm = (self.policy_kwargs.get("world_model_kwargs") or {}).get("norm", "batch")
        if norm == "batch" and self.batch_size * (self.sequence_length - 1) < 2:
            raise ValueError(
                f"norm='batch' needs at least 2 samples per training batch, but batch_size={self.batch_size} windows "
                f"of sequence_length={self.sequence_length} give {self.batch_size * (self.sequence_length - 1)} "
                "for the prior: use a larger batch or world_model_kwargs=dict(norm='group')"
            )
        if self.learning_starts < self.sequence_length * self.n_envs:
            raise ValueError(
                f"learning_starts={self.learning_starts} must be at least sequence_length * n_envs = "
                f"{self.sequence_length * self.n_envs}, so that the first update can sample whole windows"
            )

    def _check_env(self, env: VecEnv) -> None:
        """Refuse an env PWM cannot train on in its ``delay_mode`` (constructor, ``set_env`` and ``load`` alike)."""
        if self.delay_mode != "forecast":
            return
        delayed = [a or b for a, b in zip(env.env_is_wrapped(ExecutionDelay), env.env_is_wrapped(ObservationDelay))]
        if not all(delayed):
            raise UnsuitableEnvError(
                env,
                "delay_mode='forecast' learns from the executed actions (info['executed_action']) of an "
                "ExecutionDelay, or the arrived steps of an ObservationDelay, and this env has neither; " + _WRAP_HINT,
            )

    def _check_policy_kwargs(self) -> None:
        positional = ("self", "observation_space", "action_space", "lr_schedule")
        accepted = [name for name in inspect.signature(self.policy_class.__init__).parameters if name not in positional]
        unknown = sorted(set(self.policy_kwargs) - set(accepted))
        if unknown:
            raise TypeError(f"Unknown policy_kwargs keys {unknown}; accepted keys: {accepted}")

    def _setup_model(self) -> None:
        """SB3's off-policy set-up, with the replay holding what the world model reads (see ``delay_mode``)."""
        self._check_policy_kwargs()
        self._check_arguments()
        self._setup_lr_schedule()
        self.set_random_seed(self.seed)
        self.policy = self.policy_class(
            self.observation_space,
            self.action_space,
            self.lr_schedule,
            delay_mode=self.delay_mode,
            **self.policy_kwargs,
        ).to(self.device)
        self.replay_buffer = SequenceReplayBuffer(
            self.buffer_size, self.policy.model_observation_space, self.action_space, self.device, n_envs=self.n_envs
        )
        self._convert_train_freq()
        self._sample_rng = np.random.default_rng(self.seed)

    def _setup_learn(
        self,
        total_timesteps: int,
        callback: MaybeCallback = None,
        reset_num_timesteps: bool = True,
        tb_log_name: str = "run",
        progress_bar: bool = False,
    ):
        env_resets = reset_num_timesteps or self._last_obs is None
        result = super()._setup_learn(total_timesteps, callback, reset_num_timesteps, tb_log_name, progress_bar)
        if env_resets:
            self.replay_buffer.mark_episode_starts()
            self._policy_state = None
            check_finite_step(self.num_timesteps, self._last_obs)
            if self.policy.max_obs_delay is not None:
                self._arrivals = ArrivalRows(self.n_envs)
                self._arrivals.restart(self._shown_frames(self._stored_observation()))
        warn_if_no_update(self.learning_starts, result[0])
        self._projection_due = True
        return result

    def _project_run_time(self) -> None:
        """Once per ``learn``: the first update's seconds and the projected run time (warns on a CPU for days)."""
        self._projection_due = False
        report_first_update(
            self,
            sum(part[0] for part in self.last_update_times.values()),
            sum(part[1] for part in self.last_update_times.values()),
            sum(p.numel() for p in self.policy.world_model.parameters()),
            "PWM at the paper's size is meant for a GPU; on a CPU use a smaller model (policy_kwargs, e.g. the "
            "CartPole-v1 entry of hyperparams/pwm.yml) or fewer steps",
        )

    def _report_compilation(self, seconds: float) -> None:
        """Log (and with ``verbose`` print) the seconds the compiled passes took to compile."""
        self.logger.record("train/compile_seconds", seconds)
        if self.verbose >= 1:
            state = "compiled" if self.policy.update_passes.compiled else "tried to compile (now plain)"
            print(f"PWM {state} imagination and the actor-critic loss in {seconds:.1f} s (wall, once per process)")

    def _sample_action(
        self, learning_starts: int, action_noise: ActionNoise | None = None, n_envs: int = 1
    ) -> tuple[np.ndarray, np.ndarray]:
        if self.num_timesteps < learning_starts:
            action = np.array([self.action_space.sample() for _ in range(n_envs)])
            self._policy_state = None
        else:
            starts = None if self._policy_state is None else self._episode_starts
            action, self._policy_state = self.policy.predict(
                self._last_obs, self._policy_state, starts, deterministic=False
            )
        if isinstance(self.action_space, spaces.Box):
            return action, self.policy.scale_action(action)
        return action, action

    def _store_transition(self, replay_buffer, buffer_action, new_obs, reward, dones, infos) -> None:
        """Store the step as the world model learns it: its observation part and, in forecast mode,
        the executed actions (decided ones otherwise)."""
        check_finite_step(self.num_timesteps, new_obs, reward, infos)
        if self._vec_normalize_env is not None:
            obs, reward = self._last_original_obs, self._vec_normalize_env.get_original_reward()
        else:
            obs = self._last_obs
        self._last_obs = new_obs
        if self._vec_normalize_env is not None:
            self._last_original_obs = self._vec_normalize_env.get_original_obs()
        if self.policy.max_obs_delay is not None:
            self._store_arrivals(replay_buffer, dones, infos)
        else:
            if self.delay_mode == "forecast":
                buffer_action = self._executed_actions(infos)
            replay_buffer.add(self.policy.model_observation(obs), None, buffer_action, reward, dones, infos)
        life_loss = np.array([info.get("life_loss", False) for info in infos], dtype=bool)
        self._episode_starts = np.asarray(dones, dtype=bool) | life_loss

    def _stored_observation(self) -> Any:
        """The current observations as the replay takes them (before ``VecNormalize``'s scaling)."""
        return self._last_obs if self._vec_normalize_env is None else self._last_original_obs

    def _shown_frames(self, obs: Any) -> list[np.ndarray]:
        """Each env's model observation (the view's ``"observation"``) from a batch of them."""
        frames = self.policy.model_observation(obs)
        return [np.array(frame) for frame in frames]

    def _store_arrivals(
        self, replay_buffer: SequenceReplayBuffer, dones: np.ndarray, infos: list[dict[str, Any]]
    ) -> None:
        """Forecast mode under an observation delay: store the env steps that arrived, in step order, with
        their executed actions (:mod:`delayzoo.agents.pwm.arrivals`), so the world model learns the undelayed env.
        The arrivals hold the env's own frames; SB3's ``VecTransposeImage`` made the shown ones channels-first."""
        space = self.policy.model_observation_space
        transpose = self.env is not None and isinstance(self.env, VecTransposeImage)

        def frame(observation: Any) -> np.ndarray:
            array = np.asarray(observation)
            return VecTransposeImage.transpose_image(array) if transpose and array.shape != space.shape else array

        framed = [
            {**info, "arrived": [(frame(o), reward, action) for o, reward, action in info["arrived"]]}
            if "arrived" in info
            else info
            for info in infos
        ]
        self._arrivals.add(framed, np.asarray(dones, dtype=bool), self._shown_frames(self._stored_observation()))
        while (rows := self._arrivals.pop()) is not None:
            actions = np.array([row.action for row in rows])
            if isinstance(self.action_space, spaces.Box):
                actions = actions.reshape(len(rows), *self.action_space.shape).astype(np.float32)
                actions = self.policy.scale_action(actions)
            replay_buffer.add(
                np.stack([row.observation for row in rows]),
                None,
                actions,
                np.array([row.reward for row in rows], dtype=np.float32),
                np.array([row.done for row in rows]),
                [{"TimeLimit.truncated": row.truncated} for row in rows],
            )

    def _executed_actions(self, infos: list[dict[str, Any]]) -> np.ndarray:
        """``info["executed_action"]`` of every env, normalised like the buffer's actions."""
        missing = [index for index, info in enumerate(infos) if "executed_action" not in info]
        if missing:
            raise ValueError(
                f"delay_mode='forecast' needs info['executed_action'], missing for env {missing[0]}; " + _WRAP_HINT
            )
        executed = np.array([info["executed_action"] for info in infos])
        if isinstance(self.action_space, spaces.Box):
            return self.policy.scale_action(executed.reshape(len(infos), *self.action_space.shape).astype(np.float32))
        return executed

    def train(self, gradient_steps: int, batch_size: int) -> None:
        """``gradient_steps`` x (one world-model update on replayed windows, then one actor-critic
        update in imagination from all of that batch's posterior states).

        The wall and process CPU seconds of the last update's parts (``"world_model"``, sampling
        included; ``"imagination"``; ``"actor_critic"``) are in ``last_update_times``. With
        ``compile_update`` the first update also compiles (``train/compile_seconds`` in the logger).

        Skipped while the replay buffer holds less than one window per env (e.g. right after
        ``load`` without ``load_replay_buffer``).
        """
        if self.replay_buffer.stored_steps() < self.sequence_length:
            return
        policy = self.policy
        policy.set_training_mode(True)
        self._update_learning_rate(policy.world_model_optimizer)
        logs: dict[str, list[float]] = defaultdict(list)
        compile_seconds = policy.update_passes.compile_seconds
        for _ in range(gradient_steps):
            clock = PartClock(self.device)
            batch = self.replay_buffer.sample(batch_size, self.sequence_length, self._sample_rng)
            time_major = lambda x: x.transpose(0, 1)  # noqa: E731
            obs = (
                {key: time_major(value) for key, value in batch.observations.items()}
                if isinstance(batch.observations, dict)
                else time_major(batch.observations)
            )
            with policy.autocast():
                world_model_loss, metrics, starts = policy.world_model.loss(
                    obs,
                    policy.encode_action(time_major(batch.actions)),
                    time_major(batch.rewards),
                    time_major(batch.terminals).float(),
                    time_major(batch.is_first),
                )
            policy.world_model_optimizer.zero_grad()
            world_model_loss.backward()
            torch.nn.utils.clip_grad_norm_(policy.world_model.parameters(), policy.world_model_grad_clip)
            policy.world_model_optimizer.step()

            clock.lap("world_model")

            latent = starts["latent"].flatten(0, 1)  # imagination updates the starts' memories in place
            state = {name: value.flatten(0, 1) for name, value in starts["state"].items()}
            passes = policy.update_passes
            with policy.autocast():
                rollout = passes.imagine(policy.world_model, latent, state, self.imagination_horizon)
                clock.lap("imagination")
                actor_loss, critic_loss, agent_metrics = passes.imagination_loss(
                    rollout, self.gamma, policy.scan_method
                )
            policy.actor_optimizer.zero_grad()
            policy.critic_optimizer.zero_grad()
            (actor_loss + critic_loss).backward()
            torch.nn.utils.clip_grad_norm_(policy.actor_critic.actor.parameters(), policy.actor_critic_grad_clip)
            torch.nn.utils.clip_grad_norm_(policy.actor_critic.critic.parameters(), policy.actor_critic_grad_clip)
            policy.actor_optimizer.step()
            policy.critic_optimizer.step()
            policy.actor_critic.update_slow_critic()
            clock.lap("actor_critic")
            self.last_update_times = clock.times
            for name, value in {**metrics, **agent_metrics}.items():
                logs[name].append(value)

        self._n_updates += gradient_steps
        compiled = policy.update_passes.compile_seconds - compile_seconds
        if compiled > 0:  # the run-time projection waits for an update without compilation
            self._report_compilation(compiled)
        elif getattr(self, "_projection_due", False):
            self._project_run_time()
        self.logger.record("train/n_updates", self._n_updates, exclude="tensorboard")
        for name, values in logs.items():
            self.logger.record(f"train/{name}", float(np.mean(values)))

    def learn(
        self: SelfPWM,
        total_timesteps: int,
        callback: MaybeCallback = None,
        log_interval: int = 4,
        tb_log_name: str = "PWM",
        reset_num_timesteps: bool = True,
        progress_bar: bool = False,
    ) -> SelfPWM:
        """Train for ``total_timesteps`` env steps (SB3's ``learn``); returns ``self``."""
        return super().learn(
            total_timesteps=total_timesteps,
            callback=callback,
            log_interval=log_interval,
            tb_log_name=tb_log_name,
            reset_num_timesteps=reset_num_timesteps,
            progress_bar=progress_bar,
        )

    def save_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase) -> None:
        """Save the replay buffer as a plain ``.npz`` archive (loading it runs no code)."""
        self.replay_buffer.save(path)

    def load_replay_buffer(self, path: str | pathlib.Path | io.BufferedIOBase, truncate_last_traj: bool = True) -> None:
        """Load a replay buffer saved by :meth:`save_replay_buffer` for the same spaces and sizes.

        The next stored step starts an episode, since the live env does not continue the saved one.
        """
        self.replay_buffer.load(path)
        self.replay_buffer.device = self.device
        self.replay_buffer.mark_episode_starts()

    def _get_torch_save_params(self) -> tuple[list[str], list[str]]:
        return [
            "policy",
            "policy.world_model_optimizer",
            "policy.actor_optimizer",
            "policy.critic_optimizer",
        ], []
