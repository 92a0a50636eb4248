"""DelayedEZ's Ray actors: self-play with its own envs and network copy, and reanalysis with a target copy.

Each actor holds an in-process :class:`~delayzoo.agents.delayed_ez.delayed_ez.DelayedEZ` built from the
learner's settings (:func:`actor_model`), so acting, storing and reanalysing are the agent's own code:
:class:`SelfPlayActor` runs its ``_sample_action`` / ``_store_transition`` on ``envs_per_actor`` envs
and hands back the finished game segments; :class:`ReanalysisActor` runs its ``_targets`` on the batches
the learner samples. These classes are plain Python: the learner wraps them with ``ray.remote``
(:mod:`~delayzoo.agents.delayed_ez.distributed`), so this module imports without Ray.

Weights arrive by version: every call names the learner's current version and carries the weights'
object ref (inside a list, so Ray does not fetch it); an actor fetches them only when its own version
differs, e.g. after Ray restarted it.
"""

from __future__ import annotations

import os
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from stable_baselines3.common.env_util import is_wrapped
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.delayed_ez.replay import GameSegment

__all__ = ["ReanalysisActor", "SegmentBatch", "SelfPlayActor", "actor_model", "actor_settings"]

SegmentBatch = dict[str, Any]
"""What :meth:`SelfPlayActor.collect` returns: ``segments`` (finished :class:`GameSegment` s), ``episodes``
(Monitor's ``{"r", "l", "t"}`` of finished episodes), ``steps`` (env steps taken), ``key`` (incarnation
id and call number: the learner stores a key once), ``cpu_s`` and ``wall_s`` of the call."""


def actor_settings(model: Any) -> dict[str, Any]:
    """The learner's constructor keywords for its actors' models, the policy's (``mixed_precision``, ...)
    included; the learning rate is frozen at its current value (actors do not train)."""
    settings = {"policy": model.policy_class, "policy_kwargs": model.policy_kwargs,
                **model._init_from_json(model._init_to_json(model._model_settings()))}
    settings["learning_rate"] = float(model.lr_schedule(model._current_progress_remaining))
    return settings


def actor_model(settings: dict[str, Any], env: Any, device: str, seed: int | None, spaces: tuple | None = None) -> Any:
    """An in-process DelayedEZ with the learner's ``settings`` (:func:`actor_settings`), acting on ``env``
    (or, with ``env=None``, built for ``spaces``: ``(observation_space, action_space)``)."""
    from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ

    settings = {**settings, "seed": seed, "device": device, "verbose": 0, "tensorboard_log": None}
    settings.update(buffer_size=1, prefetch=False, self_play_actors=0, reanalysis_actors=0)
    if env is not None:
        return DelayedEZ(env=env, **settings)
    model = DelayedEZ(env=None, _init_setup_model=False, **settings)
    model.observation_space, model.action_space = spaces
    model._setup_model()
    return model


def _load_weights(module: torch.nn.Module, refs: list[Any]) -> None:
    import ray

    state = ray.get(refs[0])
    module.load_state_dict({name: torch.tensor(value) for name, value in state.items()})


def _monitored(factory: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
    def make() -> gym.Env:
        env = factory()
        return env if is_wrapped(env, Monitor) else Monitor(env)

    return make


class _Collector:
    """Stands for the replay in ``_store_transition``: keeps the segments it is given."""

    def __init__(self) -> None:
        self.segments: list[GameSegment] = []

    def add(self, segment: GameSegment) -> None:
        self.segments.append(segment)


class SelfPlayActor:
    """Self-play on its own vector of ``n_envs`` envs with its own copy of the network.

    :param index: the actor's number (its envs are seeded from ``seed`` and it)
    :param env_factory: a picklable function returning a new env
    :param n_envs: envs of this actor (``envs_per_actor``)
    :param settings: the learner's constructor keywords (see :func:`actor_model`)
    :param seed: the learner's seed (``None``: unseeded)
    :param device: torch device of the actor's network
    :param threads: torch threads of the actor
    """

    def __init__(
        self,
        index: int,
        env_factory: Callable[[], gym.Env],
        n_envs: int,
        settings: dict[str, Any],
        seed: int | None,
        device: str = "cpu",
        threads: int = 1,
    ) -> None:
        torch.set_num_threads(threads)
        self.index = index
        self.incarnation = uuid.uuid4().hex  # a restarted actor is a new incarnation, with new envs
        self.calls = 0
        self.version = -1
        if seed is not None:
            seed = seed + 1000 * (index + 1) + (int.from_bytes(os.urandom(2), "little") if self._restarted() else 0)
        env = DummyVecEnv([_monitored(env_factory) for _ in range(n_envs)])
        self.model = actor_model(settings, env, device, seed)
        self.model._setup_learn(np.iinfo(np.int64).max // 2)

    @staticmethod
    def _restarted() -> bool:
        try:
            import ray

            with warnings.catch_warnings():  # Ray 2.60 warns about its own use of a deprecated property here
                warnings.simplefilter("ignore")
                return bool(ray.get_runtime_context().was_current_actor_reconstructed)
        except Exception:  # not inside Ray (the class used directly)
            return False

    def ready(self) -> int:
        """The actor's process id, once it is built (the learner waits for this to place the actors)."""
        return os.getpid()

    def collect(self, vector_steps: int, version: int, weights: list[Any], progress_remaining: float) -> SegmentBatch:
        """Take ``vector_steps`` steps of every env with the network of ``version``; return the finished segments.

        :param weights: ``[object ref]`` of the online network's state (fetched when ``version`` is new here)
        :param progress_remaining: the learner's remaining progress (the visit temperature follows it)
        """
        wall, cpu = time.perf_counter(), time.process_time()
        model = self.model
        if version != self.version:
            _load_weights(model.policy.network, weights)
            self.version = version
        model._current_progress_remaining = progress_remaining
        collector = _Collector()
        episodes: list[dict[str, float]] = []
        env = model.env
        try:
            for _ in range(vector_steps):
                actions, buffer_actions = model._sample_action(model.learning_starts, None, env.num_envs)
                new_obs, rewards, dones, infos = env.step(actions)
                model.num_timesteps += env.num_envs
                model._store_transition(collector, buffer_actions, new_obs, rewards, dones, infos)
                episodes += [dict(info["episode"]) for info in infos if "episode" in info]
        except BaseException:
            # Ray retries the call (or hands the error to the learner): start it from fresh episodes, the
            # running segments are dropped (never half-stored)
            model._setup_learn(np.iinfo(np.int64).max // 2)
            raise
        self.calls += 1
        return {
            "segments": collector.segments,
            "episodes": episodes,
            "steps": vector_steps * env.num_envs,
            "key": (self.incarnation, self.calls),
            "cpu_s": time.process_time() - cpu,
            "wall_s": time.perf_counter() - wall,
        }


class ReanalysisActor:
    """Value and policy targets of the learner's batches, with its own copy of the target network.

    :param index: the actor's number (its search noise is seeded from ``seed`` and it)
    :param settings: the learner's constructor keywords (see :func:`actor_model`)
    :param spaces: the learner's ``(observation_space, action_space)``
    :param seed: the learner's seed
    :param device: torch device of the actor's target network
    :param threads: torch threads of the actor
    """

    def __init__(
        self,
        index: int,
        settings: dict[str, Any],
        spaces: tuple[gym.Space, gym.Space],
        seed: int | None,
        device: str = "cpu",
        threads: int = 1,
    ) -> None:
        torch.set_num_threads(threads)
        self.version = -1
        seed = None if seed is None else seed + 7919 * (index + 1)
        self.model = actor_model(settings, None, device, seed, spaces)

    def ready(self) -> int:
        """The actor's process id, once it is built."""
        return os.getpid()

    def targets(
        self, batches: list[Any], version: int, weights: list[Any]
    ) -> tuple[list[tuple[np.ndarray, ...]], float]:
        """The targets of ``batches`` with the target network of ``version`` (as arrays), and the call's CPU seconds.

        :param weights: ``[object ref]`` of the target network's state
        """
        cpu = time.process_time()
        if version != self.version:
            _load_weights(self.model.policy.target_network, weights)
            self.version = version
        targets = self.model._targets(batches)
        return [tuple(t.cpu().numpy() for t in batch) for batch in targets], time.process_time() - cpu
