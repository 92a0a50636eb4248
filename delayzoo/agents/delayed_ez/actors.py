"""DelayedEZ's Ray actors: self-play with its own envs and network copy, and reanalysis with a target copy.

An actor holds the parts it uses, not a learner: :class:`ActorParts` (what the learner's
:meth:`~delayzoo.agents.delayed_ez.delayed_ez.DelayedEZ.actor_parts` gives) builds the policy, and
:class:`SelfPlayActor` acts and writes games through a :class:`~delayzoo.agents.delayed_ez.self_play.SelfPlay`
on ``envs_per_actor`` envs, handing back the finished game segments, while :class:`ReanalysisActor` computes
the targets of the batches the learner samples through a :class:`~delayzoo.agents.delayed_ez.reanalysis.Reanalysis`:
the same code as the learner's in-process acting and reanalysis. These classes are plain Python: the learner wraps
them with ``ray.remote`` (:mod:`~delayzoo.agents.delayed_ez.distributed`), so this module imports without Ray.

Weights arrive by version: every call names the learner's current version and carries the weights'
object ref (inside a list, so Ray does not fetch it); an actor fetches them only when its own version
differs, e.g. after Ray restarted it.
"""

from __future__ import annotations

import dataclasses
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
from stable_baselines3.common.type_aliases import Schedule
from stable_baselines3.common.utils import get_schedule_fn, set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo.agents.common.checks import check_finite_step
from delayzoo.agents.delayed_ez.config import SearchConfig
from delayzoo.agents.delayed_ez.policies import DelayedEZPolicy
from delayzoo.agents.delayed_ez.reanalysis import Reanalysis, ReanalysisConfig, ReanalysisCounts
from delayzoo.agents.delayed_ez.self_play import SelfPlay, SelfPlayConfig

__all__ = ["ActorParts", "ReanalysisActor", "SegmentBatch", "SelfPlayActor"]

SegmentBatch = dict[str, Any]
"""What :meth:`SelfPlayActor.collect` returns: ``segments`` (finished :class:`GameSegment` s), ``episodes``
(Monitor's ``{"r", "l", "t"}`` of finished episodes), ``steps`` (env steps taken), ``key`` (incarnation
id and call number: the learner stores a key once), ``cpu_s`` and ``wall_s`` of the call."""


@dataclasses.dataclass(frozen=True)
class ActorParts:
    """What an actor builds its parts from: the learner's policy class and keywords, its configs, and its
    learning rate (frozen: actors do not train).

    :param policy_class: the learner's policy class
    :param policy_kwargs: its keywords (``net_kwargs``, ``mixed_precision``, ...)
    :param search_config: the search
    :param forward_model: roll through the pending actions before searching
    :param self_play: what acting writes
    :param reanalysis: how targets are built
    :param learning_rate: the learner's current learning rate (the optimizer's, unused by actors)
    """

    policy_class: type[DelayedEZPolicy]
    policy_kwargs: dict[str, Any]
    search_config: SearchConfig
    forward_model: bool
    self_play: SelfPlayConfig
    reanalysis: ReanalysisConfig
    learning_rate: float

    def build_policy(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        device: str | torch.device,
        seed: int | None,
        lr_schedule: Schedule | None = None,
    ) -> DelayedEZPolicy:
        """The policy (network, target network, search) of the learner (``lr_schedule``: its schedule) or of an
        actor (whose weights come from the learner, and whose optimizer is unused)."""
        policy = self.policy_class(
            observation_space, action_space, lr_schedule or get_schedule_fn(self.learning_rate),
            search_config=self.search_config, forward_model=self.forward_model, seed=seed, **self.policy_kwargs,
        )
        return policy.to(device)


def _load_weights(module: torch.nn.Module, refs: list[Any]) -> None:
    import ray

    state = ray.get(refs[0])
    module.load_state_dict({name: torch.tensor(value) for name, value in state.items()})


def _monitored(factory: Callable[[], gym.Env]) -> Callable[[], gym.Env]:
    def make() -> gym.Env:
        env = factory()
        return env if is_wrapped(env, Monitor) else Monitor(env)

    return make


class SelfPlayActor:
    """Self-play on its own vector of ``n_envs`` envs with its own copy of the network.

    :param index: the actor's number (its envs are seeded from ``seed`` and it)
    :param env_factory: a picklable function returning a new env
    :param n_envs: envs of this actor (``envs_per_actor``)
    :param parts: what the learner's policy, search and writing are made of
    :param seed: the learner's seed (``None``: unseeded)
    :param device: torch device of the actor's network
    :param threads: torch threads of the actor
    """

    def __init__(
        self,
        index: int,
        env_factory: Callable[[], gym.Env],
        n_envs: int,
        parts: ActorParts,
        seed: int | None,
        device: str = "cpu",
        threads: int = 1,
    ) -> None:
        torch.set_num_threads(threads)
        self.index = index
        self.incarnation = uuid.uuid4().hex  # a restarted actor is a new incarnation, with new envs
        self.calls = 0
        self.version = -1
        self.steps = 0
        if seed is not None:
            seed = seed + 1000 * (index + 1) + (int.from_bytes(os.urandom(2), "little") if self._restarted() else 0)
            set_random_seed(seed)
        self.env = DummyVecEnv([_monitored(env_factory) for _ in range(n_envs)])
        if seed is not None:
            self.env.seed(seed)
            self.env.action_space.seed(seed)
        self.policy = parts.build_policy(self.env.observation_space, self.env.action_space, device, seed)
        self.search_config = parts.search_config
        self.self_play = SelfPlay(self.policy, parts.self_play, n_envs)
        self._restart_episodes()

    def _restart_episodes(self) -> None:
        self.observations = self.env.reset()
        self.self_play.start(self.observations)

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
        if version != self.version:
            _load_weights(self.policy.network, weights)
            self.version = version
        temperature = self.search_config.temperature(progress_remaining)
        segments, episodes = [], []
        try:
            for _ in range(vector_steps):
                actions = self.self_play.act(self.observations, temperature)
                new_obs, rewards, dones, infos = self.env.step(actions)
                self.steps += self.env.num_envs
                check_finite_step(self.steps, new_obs, rewards, infos)
                segments += self.self_play.store(actions, new_obs, rewards, dones, infos)
                self.observations = new_obs
                episodes += [dict(info["episode"]) for info in infos if "episode" in info]
        except BaseException:
            # Ray retries the call (or hands the error to the learner): start it from fresh episodes, the
            # running segments are dropped (never half-stored)
            self._restart_episodes()
            raise
        self.calls += 1
        return {
            "segments": segments,
            "episodes": episodes,
            "steps": vector_steps * self.env.num_envs,
            "key": (self.incarnation, self.calls),
            "cpu_s": time.process_time() - cpu,
            "wall_s": time.perf_counter() - wall,
        }


class ReanalysisActor:
    """Value and policy targets of the learner's batches, with its own copy of the target network.

    :param index: the actor's number (its search noise is seeded from ``seed`` and it)
    :param parts: what the learner's policy and reanalysis are made of
    :param spaces: the learner's ``(observation_space, action_space)``
    :param seed: the learner's seed
    :param device: torch device of the actor's target network
    :param threads: torch threads of the actor
    """

    def __init__(
        self,
        index: int,
        parts: ActorParts,
        spaces: tuple[gym.Space, gym.Space],
        seed: int | None,
        device: str = "cpu",
        threads: int = 1,
    ) -> None:
        torch.set_num_threads(threads)
        self.version = -1
        seed = None if seed is None else seed + 7919 * (index + 1)
        policy = parts.build_policy(*spaces, device, seed)
        self.reanalysis = Reanalysis(policy.target_network, policy.mcts, parts.reanalysis, policy.device)
        self.rng = np.random.default_rng(seed)

    def ready(self) -> int:
        """The actor's process id, once it is built."""
        return os.getpid()

    def targets(
        self, batches: list[Any], version: int, weights: list[Any]
    ) -> tuple[list[tuple[np.ndarray, ...]], ReanalysisCounts, float]:
        """The targets of ``batches`` with the target network of ``version`` (as arrays), what the reanalysis did
        and the call's CPU seconds.

        :param weights: ``[object ref]`` of the target network's state
        """
        cpu = time.process_time()
        if version != self.version:
            _load_weights(self.reanalysis.target_network, weights)
            self.version = version
        counts = ReanalysisCounts()
        targets = self.reanalysis.targets(batches, self.rng, counts)
        return [tuple(t.cpu().numpy() for t in batch) for batch in targets], counts, time.process_time() - cpu
