"""DelayedEZ on Ray: the learner's side of the self-play and reanalysis actors (``self_play_actors``,
``reanalysis_actors``).

The learner stays in the calling process, in SB3's ``learn`` loop; :class:`ActorRun` lives for one
``learn`` call and replaces two of its steps:

- *collecting* (:meth:`ActorRun.collect_rollouts`): each :class:`~delayzoo.agents.delayed_ez.actors.SelfPlayActor`
  has at most ``CALLS_IN_FLIGHT`` ``collect`` calls in flight; the learner stores the finished segments
  they return (each call's result once, by its key) and counts their steps in ``num_timesteps``. A round of
  SB3's loop is ``train_freq * n_envs`` received steps (``n_envs = self_play_actors * envs_per_actor``) followed by
  ``gradient_steps`` updates, so the replay ratio is the in-process one. The throttle: an actor
  gets a new call only while the steps taken (received, held in the actors' running segments, in
  flight) stay within one round plus one running segment per env of the steps the learner has trained
  on; faster actors wait for the learner, a faster learner waits for the actors;
- *reanalysis* (:meth:`ActorRun.next_round`): the learner samples a round's batches and a
  :class:`~delayzoo.agents.delayed_ez.actors.ReanalysisActor` computes their targets; ``reanalysis_actors``
  rounds are in flight at once (round-robin), like EfficientZero's batch queue.

Weights travel through Ray's object store by version: the online network every
``self_play_update_interval`` updates, the target network at every refresh. Faults are Ray's: actors are
created with ``max_restarts`` and ``max_task_retries`` (a killed actor is restarted and its call retried;
an exception in a call is retried after the actor restarted its episodes); when the retries run out,
the error (with the actor's traceback) stops ``learn``. Actors not ready within ``placement_timeout``
seconds stop it, saying whether the cluster lacks what they asked for or they were still starting.

Stopping: :meth:`ActorRun.close` at the end of ``learn`` (also on an error or Ctrl-C) stops the actors and a
Ray the run started. SIGTERM, where it has its default handler and ``learn`` runs in the main thread, does
the same before it ends the process (a caller's own handler, such as the zoo's, is left in place). When the
learner is killed outright, a Ray it started goes with it: Ray ties its node processes to the process that
called ``ray.init``, and its workers, the actors among them, exit with the node.
"""

from __future__ import annotations

import collections
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.buffers import ReplayBuffer
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.type_aliases import RolloutReturn, TrainFreq
from stable_baselines3.common.vec_env import VecEnv

from delayzoo.agents.common.ray_connect import connect, import_ray
from delayzoo.agents.delayed_ez.actors import ReanalysisActor, SelfPlayActor
from delayzoo.agents.delayed_ez.config import ActorConfig
from delayzoo.agents.delayed_ez.reanalysis import ReanalysisCounts, Targets
from delayzoo.agents.delayed_ez.replay import ReplayBatch

__all__ = ["ActorRun", "RayActorsMixin", "actor_env_factory", "env_for_spaces"]

DEFAULT_CPUS = 0.25
"""CPUs an actor reserves by default: a fraction, so actors find room beside sweep cells that hold whole cores."""

CALLS_IN_FLIGHT = 2
"""``collect`` calls queued per self-play actor: the next one starts as soon as one ends, without waiting for
the learner's round trip."""

DEFAULT_REANALYSIS_GPUS = 0.05
"""GPU share of a reanalysis actor where the cluster has GPUs (the reference's batch workers: 0.05)."""

_NO_FACTORY = (
    "pass an env id string or a picklable function that returns a new env (as SubprocVecEnv takes env "
    "functions), e.g. env=lambda: PendingActionsObservation(ExecutionDelay(gym.make(...), ...))"
)


def env_for_spaces(source: Any) -> Any:
    """The env the learner reads its spaces from: ``source``, or one env of a factory (an env id stays an id)."""
    if callable(source) and not isinstance(source, (gym.Env, VecEnv)):
        return source()
    return source


def actor_env_factory(source: Any) -> Callable[[], gym.Env]:
    """A picklable function that builds a new env like ``source`` in another process.

    ``source``: an env id, a picklable env factory, or a Gymnasium env whose ``spec`` rebuilds it with the
    same wrappers; anything else (a VecEnv, an env with wrappers its spec does not record) is a ``ValueError``.
    """
    if isinstance(source, str):
        return _MakeById(source)
    if callable(source) and not isinstance(source, (gym.Env, VecEnv)):
        try:
            cloudpickle.dumps(source)
        except Exception as error:
            raise ValueError(
                f"the env factory {source!r} cannot be pickled for the actors ({error}); {_NO_FACTORY}"
            ) from None
        return source
    if isinstance(source, gym.Env) and source.spec is not None:
        try:
            rebuilt = gym.make(source.spec)
        except Exception:  # the spec does not rebuild it
            rebuilt = None
        if rebuilt is not None:
            same = str(rebuilt) == str(source)
            rebuilt.close()
            if same:
                return _MakeById(source.spec)
    raise ValueError(
        f"self-play actors build their own envs, and {source!r} cannot be rebuilt in another process: {_NO_FACTORY}"
    )


class _MakeById:
    """``gym.make(id_or_spec)`` as a picklable function."""

    def __init__(self, id_or_spec: Any) -> None:
        self.id_or_spec = id_or_spec

    def __call__(self) -> gym.Env:
        return gym.make(self.id_or_spec)

    def __repr__(self) -> str:
        return f"gym.make({getattr(self.id_or_spec, 'id', self.id_or_spec)!r})"


def _state_arrays(module: torch.nn.Module) -> dict[str, np.ndarray]:
    return {name: value.detach().cpu().numpy() for name, value in module.state_dict().items()}


class ActorRun:
    """The actors of one ``learn`` call of ``model`` (a DelayedEZ), from placement to :meth:`close`.

    :param model: the learner
    :param config: how many actors, where, with what resources
    :param env_factory: builds the self-play envs (needed with self-play actors)
    """

    def __init__(self, model: Any, config: ActorConfig, env_factory: Callable[[], gym.Env] | None) -> None:
        self.ray = import_ray("DelayedEZ's actors run")
        self.config = config
        self.started = False
        self.self_play: list[Any] = []
        self.reanalysis: list[Any] = []
        self._pending: dict[Any, int] = {}  # collect call -> self-play actor
        self._rounds: collections.deque[tuple[list[ReplayBatch], Any]] = collections.deque()
        self._next_reanalysis = 0
        self._seen: set[tuple[str, int]] = set()
        self._incarnation: dict[int, str] = {}
        self._unfinished = [0] * config.self_play_actors  # steps in each actor's running segments
        self._in_flight_steps = 0
        self._received = 0  # steps received in this learn
        self._consumed = 0  # steps of the rounds handed to SB3's loop
        self._steps_per_call = 1
        self._actor_steps = [0] * config.self_play_actors
        self._actor_wall = [0.0] * config.self_play_actors
        self.learner_wait = 0.0
        """Seconds the learner waited for actors in this learn."""
        self.actor_cpu = 0.0
        """Process CPU seconds of the actors' calls received in this learn."""
        self._start = time.perf_counter()
        self._start_steps, self._start_updates = int(model.num_timesteps), int(model._n_updates)
        self._weights_version = self._target_version = 0
        self._handles_sigterm = (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
        )
        if self._handles_sigterm:  # ray.init keeps it (connect puts back this process's handlers)
            signal.signal(signal.SIGTERM, self._stop_on_sigterm)
        try:
            self.started = connect(config.ray_address, "DelayedEZ's actors")
            self._spawn(model, env_factory)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------ placement
    def _resources(self, given: dict[str, float] | None, gpu_default: bool) -> dict[str, float]:
        if given is not None:
            return {"num_cpus": DEFAULT_CPUS, **given}
        gpus = self.ray.cluster_resources().get("GPU", 0.0)
        return {"num_cpus": DEFAULT_CPUS, **({"num_gpus": DEFAULT_REANALYSIS_GPUS} if gpu_default and gpus else {})}

    def _spawn(self, model: Any, env_factory: Callable[[], gym.Env] | None) -> None:
        ray, config = self.ray, self.config
        parts = model.actor_parts()
        faults = {"max_restarts": config.actor_max_restarts, "max_task_retries": config.actor_max_restarts}
        self._weights = ray.put(_state_arrays(model.policy.network))
        self._target = ray.put(_state_arrays(model.policy.target_network))
        groups = []
        if config.self_play_actors:
            assert env_factory is not None
            resources = self._resources(config.self_play_resources, gpu_default=False)
            device = "cuda" if resources.get("num_gpus") else "cpu"
            threads = max(1, int(resources["num_cpus"]))
            remote = ray.remote(SelfPlayActor).options(**resources, **faults)
            self.self_play = [
                remote.remote(index, env_factory, config.envs_per_actor, parts, model.seed, device, threads)
                for index in range(config.self_play_actors)
            ]
            groups.append(("SelfPlayActor", self.self_play, resources))
            self._steps_per_call = int(model.train_freq.frequency)
        if config.reanalysis_actors:
            resources = self._resources(config.reanalysis_resources, gpu_default=True)
            device = "cuda" if resources.get("num_gpus") else "cpu"
            threads = max(1, int(resources["num_cpus"]))
            spaces = (model.observation_space, model.action_space)
            remote = ray.remote(ReanalysisActor).options(**resources, **faults)
            self.reanalysis = [
                remote.remote(index, parts, spaces, model.seed, device, threads)
                for index in range(config.reanalysis_actors)
            ]
            groups.append(("ReanalysisActor", self.reanalysis, resources))
        for name, actors, resources in groups:
            refs = [actor.ready.remote() for actor in actors]
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=config.placement_timeout)
            for ref in ready:
                ray.get(ref)  # an actor whose construction failed raises its error here
            if len(ready) < len(refs):
                raise RuntimeError(self._not_ready_message(len(refs) - len(ready), len(refs), name, resources))

    def _not_ready_message(self, missing: int, count: int, name: str, resources: dict[str, float]) -> str:
        """Why ``missing`` of ``count`` actors were not ready in time: the cluster lacks what one asks for, or it
        has it and their processes were still starting (a busy machine)."""
        timeout = self.config.placement_timeout
        available = {key: round(value, 2) for key, value in self.ray.available_resources().items()
                     if key in ("CPU", "GPU")}
        asked = {"CPU": resources.get("num_cpus", 0.0), "GPU": resources.get("num_gpus", 0.0)}
        if all(available.get(key, 0.0) >= value for key, value in asked.items()):
            return (
                f"{missing} of {count} {name}s were not ready within {timeout:g} s although the Ray cluster has "
                f"{available} free, enough for one asking for {resources}: their processes were still starting "
                "(a busy machine starts them slowly); pass a longer actor_kwargs=dict(placement_timeout=...) "
                "or free the machine"
            )
        return (
            f"{missing} of {count} {name}s could not be placed within {timeout:g} s: each asks for {resources}, "
            f"and the Ray cluster has {available} free; lower the actors' resources (self_play_resources / "
            "reanalysis_resources), use fewer actors, or free the cluster"
        )

    # ------------------------------------------------------------------ weights
    def updated(self, model: Any, target_refreshed: bool) -> None:
        """After each update: the online weights to the self-play actors at their interval, the target to reanalysis."""
        if self.self_play and model._n_updates % self.config.self_play_update_interval == 0:
            self._weights = self.ray.put(_state_arrays(model.policy.network))
            self._weights_version += 1
        if self.reanalysis and target_refreshed:
            self._target = self.ray.put(_state_arrays(model.policy.target_network))
            self._target_version += 1

    # ------------------------------------------------------------------ self-play
    def _issue(self, model: Any, round_steps: int) -> None:
        """A ``collect`` call to every idle self-play actor the throttle lets run."""
        epa = self.config.envs_per_actor
        slack = round_steps + len(self.self_play) * epa * model.replay_config.segment_length
        busy = collections.Counter(self._pending.values())
        for _ in range(CALLS_IN_FLIGHT):
            for index, actor in enumerate(self.self_play):
                if busy[index] >= CALLS_IN_FLIGHT:
                    continue
                taken = self._received + sum(self._unfinished) + self._in_flight_steps
                warming_up = model.num_timesteps <= model.learning_starts
                if not warming_up and taken >= self._consumed + slack:
                    return
                ref = actor.collect.options(retry_exceptions=True).remote(
                    self._steps_per_call, self._weights_version, [self._weights], model._current_progress_remaining
                )
                self._pending[ref] = index
                busy[index] += 1
                self._in_flight_steps += self._steps_per_call * epa

    def _receive(self, model: Any, ref: Any, callback: BaseCallback, log_interval: int | None) -> tuple[int, bool]:
        """Store one call's segments; ``(episodes finished, continue training)``."""
        index = self._pending.pop(ref)
        self._in_flight_steps -= self._steps_per_call * self.config.envs_per_actor
        try:
            result = self.ray.get(ref)
        except self.ray.exceptions.RayError as error:
            raise RuntimeError(
                f"SelfPlayActor {index} failed {self.config.actor_max_restarts + 1} times (actor_max_restarts="
                f"{self.config.actor_max_restarts}); its last error:\n{error}"
            ) from error
        incarnation, _ = result["key"]
        if self._incarnation.get(index) != incarnation:  # restarted: its earlier running segments are lost
            self._incarnation[index] = incarnation
            self._unfinished[index] = 0
        if result["key"] in self._seen:
            return 0, True
        self._seen.add(result["key"])
        stored = sum(len(segment) for segment in result["segments"])
        self._unfinished[index] += result["steps"] - stored
        self._actor_steps[index] += result["steps"]
        self._actor_wall[index] += result["wall_s"]
        self.actor_cpu += result["cpu_s"]
        for segment in result["segments"]:
            model.replay_buffer.add(segment)
        before = model.num_timesteps
        model.num_timesteps += stored
        self._received += stored
        model._update_current_progress_remaining(model.num_timesteps, model._total_timesteps)
        for _ in range(model.num_timesteps // model.n_envs - before // model.n_envs):
            if not callback.on_step():
                return 0, False
        model.ep_info_buffer.extend(result["episodes"])
        for _ in result["episodes"]:
            model._episode_num += 1
            if log_interval is not None and model._episode_num % log_interval == 0:
                self.record(model)
                model.dump_logs()
        return len(result["episodes"]), True

    def collect_rollouts(self, model: Any, callback: BaseCallback, log_interval: int | None) -> RolloutReturn:
        """One round of SB3's loop: ``train_freq * n_envs`` received steps (waiting for the actors if needed)."""
        round_steps = int(model.train_freq.frequency) * model.n_envs
        callback.on_rollout_start()
        episodes = 0
        while self._received - self._consumed < round_steps:
            self._issue(model, round_steps)
            wait = time.perf_counter()
            ready, _ = self.ray.wait(list(self._pending), num_returns=1)
            self.learner_wait += time.perf_counter() - wait
            for ref in ready:
                finished, go_on = self._receive(model, ref, callback, log_interval)
                episodes += finished
                if not go_on:
                    return RolloutReturn(0, episodes, continue_training=False)
        self._consumed += round_steps
        self._issue(model, round_steps)  # the actors act for the next round while this one trains
        callback.on_rollout_end()
        return RolloutReturn(round_steps, episodes, continue_training=True)

    def owed_rounds(self, model: Any) -> int:
        """Rounds of received steps not yet trained on when ``learn`` reached its steps (trained then, so the
        replay ratio is the configured one)."""
        if not self.self_play or model.num_timesteps <= model.learning_starts:
            return 0
        rounds = (self._received - self._consumed) // (int(model.train_freq.frequency) * model.n_envs)
        self._consumed += rounds * int(model.train_freq.frequency) * model.n_envs
        return int(rounds)

    # ------------------------------------------------------------------ reanalysis
    def next_round(
        self, model: Any, sample: Callable[[], ReplayBatch], gradient_steps: int
    ) -> tuple[list[ReplayBatch], list[Targets], ReanalysisCounts]:
        """The oldest round in flight (its batches, their targets and what the reanalysis did), after topping up
        the rounds in flight.

        :param sample: draws one batch from the replay
        """
        while len(self._rounds) < len(self.reanalysis):
            batches = [sample() for _ in range(gradient_steps)]
            actor = self.reanalysis[self._next_reanalysis]
            self._next_reanalysis = (self._next_reanalysis + 1) % len(self.reanalysis)
            call = actor.targets.options(retry_exceptions=True)
            self._rounds.append((batches, call.remote(batches, self._target_version, [self._target])))
        batches, ref = self._rounds.popleft()
        wait = time.perf_counter()
        try:
            arrays, counts, cpu = self.ray.get(ref)
        except self.ray.exceptions.RayError as error:
            raise RuntimeError(
                f"a ReanalysisActor failed {self.config.actor_max_restarts + 1} times (actor_max_restarts="
                f"{self.config.actor_max_restarts}); its last error:\n{error}"
            ) from error
        self.learner_wait += time.perf_counter() - wait
        self.actor_cpu += cpu
        if len(batches) < gradient_steps:  # a round sampled for fewer updates: sample this one now
            return self.next_round(model, sample, gradient_steps)
        targets: list[Targets] = [
            tuple(torch.tensor(a, device=model.device) for a in batch) for batch in arrays  # type: ignore[misc]
        ]
        return batches[:gradient_steps], targets[:gradient_steps], counts

    # ------------------------------------------------------------------ logging and stopping
    def replay_ratio(self, model: Any) -> float:
        """Updates per env step received after ``learning_starts`` in this ``learn`` (NaN before any)."""
        start = max(self._start_steps, model.learning_starts)
        steps = model.num_timesteps - start
        return (model._n_updates - self._start_updates) / steps if steps > 0 else math.nan

    def record(self, model: Any) -> None:
        """The replay ratio, the learner's waiting time and each self-play actor's steps/s, to the SB3 logger."""
        logger = model.logger
        if self.self_play:
            logger.record("actors/replay_ratio", self.replay_ratio(model))
            for index, (steps, wall) in enumerate(zip(self._actor_steps, self._actor_wall)):
                logger.record(f"actors/self_play_{index}_steps_per_s", steps / wall if wall else 0.0)
        logger.record("actors/learner_wait_s", self.learner_wait)
        elapsed = time.perf_counter() - self._start
        logger.record("actors/learner_wait_fraction", self.learner_wait / elapsed if elapsed else 0.0)

    def _stop_on_sigterm(self, number: int, frame: Any) -> None:
        """SIGTERM without a handler of the caller's: stop the actors and a Ray this run started, then end the
        process as SIGTERM's default does (no Ray process of the run outlives it)."""
        self.close()
        os.kill(os.getpid(), signal.SIGTERM)  # close() put the default handler back

    def close(self) -> None:
        """Stop every actor (and Ray, when this run started it); give SIGTERM back its default handler."""
        for actor in self.self_play + self.reanalysis:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # already gone
                pass
        self.self_play, self.reanalysis = [], []
        self._pending.clear()
        self._rounds.clear()
        if self.started:
            self.ray.shutdown()
            self.started = False
        if self._handles_sigterm:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            self._handles_sigterm = False


class RayActorsMixin:
    """The learner's side of the actors: DelayedEZ's ``learn`` starts them for its call, SB3's loop collects
    through them, and they stop at its end (put before ``OffPolicyAlgorithm`` among the bases)."""

    _actors: ActorRun | None
    actor_config: ActorConfig
    train_freq: TrainFreq
    gradient_steps: int
    n_envs: int
    env: VecEnv | None
    prefetch: bool | str
    verbose: int
    _env_source: Any

    def _start_actors(self) -> None:
        """Place this learn's actors (see :mod:`~delayzoo.agents.delayed_ez.distributed`)."""
        config = self.actor_config
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
