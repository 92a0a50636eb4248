"""DelayedEZ's acting part: one batched search for a vector of envs, and the game segments it writes.

:class:`SelfPlay` holds the policy (network and search) and one
:class:`~delayzoo.agents.delayed_ez.replay.GameWriter` per env. The learner holds one for SB3's loop
(:meth:`DelayedEZ._sample_action <delayzoo.agents.delayed_ez.delayed_ez.DelayedEZ>` and ``_store_transition``
call it), and each self-play Ray actor holds its own (:mod:`~delayzoo.agents.delayed_ez.actors`), built from
the same :class:`SelfPlayConfig`: acting, storing and the policy targets they write are one code path.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import VecEnv

from delayzoo.agents.common.plain_save import UnsuitableEnvError
from delayzoo.agents.delayed_ez.policies import DelayedEZPolicy
from delayzoo.agents.delayed_ez.replay import GameSegment, GameWriter
from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation
from delayzoo.wrappers.atari import FrameStack

__all__ = [
    "FORECAST_POLICIES",
    "REPLAY_ACTIONS",
    "SelfPlay",
    "SelfPlayConfig",
    "check_action_space",
    "check_clip_reward",
    "check_env",
]

REPLAY_ACTIONS = ("executed", "decided")
FORECAST_POLICIES = ("reanalyse", "store")


def check_action_space(action_space: spaces.Space) -> None:
    """A ``ValueError`` for an action space the search cannot plan over (not ``Discrete`` from 0)."""
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(
            f"DelayedEZ plans over a finite action set and needs a Discrete action space, got {action_space}; "
            "use PWM for continuous actions"
        )
    if int(action_space.start) != 0:
        raise ValueError(f"DelayedEZ needs a Discrete action space starting at 0, got start={action_space.start}")


def check_env(env: VecEnv, action_space: spaces.Space, frame_stack: int | None) -> int | None:
    """Refuse an env DelayedEZ cannot act on: an observation delay, an execution delay it cannot see, frames
    stacked other than ``frame_stack`` says (an :class:`~delayzoo.agents.common.plain_save.UnsuitableEnvError`
    naming the env); return ``frame_stack``, read from the env's ``FrameStack`` when it is ``None``."""
    check_action_space(action_space)
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
    if frame_stack is None:
        return found
    if any(stacked) and frame_stack != found:
        raise UnsuitableEnvError(env, f"frame_stack={frame_stack} but it stacks {found} frames (FrameStack)")
    return frame_stack


def check_clip_reward(value: Any) -> bool | float:
    """``clip_reward`` as stored: a bool, or a clip bound ``c > 0`` (a ``TypeError`` / ``ValueError`` naming it)."""
    if isinstance(value, (bool, np.bool_)) or value is None:
        return bool(value)
    if isinstance(value, (int, float, np.integer, np.floating)) and value >= 0:
        return float(value)
    if isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"clip_reward must be a bool or a non-negative number, got {value!r}")
    raise TypeError(f"clip_reward must be a bool or a non-negative number, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SelfPlayConfig:
    """What acting writes into the replay (see DelayedEZ's keywords of the same names).

    :param segment_length: episodes are written as segments of at most this many transitions
    :param frame_stack: frames stacked channels-first in each observation (the writers keep the newest)
    :param replay_actions: ``"executed"`` (the env's) or ``"decided"`` (the agent's) actions are stored
    :param forecast_policy: ``"store"`` a search rooted at a forecast as the target of the forecast step, or
        only act on it (``"reanalyse"``)
    :param clip_reward: the learning rewards: their sign (``True``), clipped to ``[-c, c]``, or as they are
    """

    segment_length: int = 200
    frame_stack: int = 1
    replay_actions: str = "executed"
    forecast_policy: str = "store"
    clip_reward: bool | float = False

    def __post_init__(self) -> None:
        if self.replay_actions not in REPLAY_ACTIONS:
            raise ValueError(f"replay_actions must be one of {REPLAY_ACTIONS} or None, got {self.replay_actions!r}")
        if self.forecast_policy not in FORECAST_POLICIES:
            raise ValueError(f"forecast_policy must be one of {FORECAST_POLICIES}, got {self.forecast_policy!r}")

    def learning_rewards(self, rewards: np.ndarray) -> np.ndarray:
        """The rewards the model learns from (the scores in the logs stay the env's)."""
        rewards = np.asarray(rewards, dtype=np.float64)
        if self.clip_reward is True:
            return np.sign(rewards)
        if self.clip_reward:
            return np.clip(rewards, -self.clip_reward, self.clip_reward)
        return rewards


def observation_part(obs: Any) -> Any:
    """The env's own observation inside the pending view's ``Dict`` (or the observation itself)."""
    return obs["observation"] if isinstance(obs, dict) else obs


class SelfPlay:
    """Acting with one batched search over a vector of envs, and writing their games.

    :param policy: the policy (network and search) that acts
    :param config: what is written
    :param n_envs: envs acting together
    """

    def __init__(self, policy: DelayedEZPolicy, config: SelfPlayConfig, n_envs: int) -> None:
        self.policy, self.config = policy, config
        num_actions = int(policy.action_space.n)  # type: ignore[attr-defined]
        self.writers = [GameWriter(num_actions, config.segment_length, config.frame_stack) for _ in range(n_envs)]

    def start(self, observations: Any) -> None:
        """Begin every env's episode at its observation."""
        first = observation_part(observations)
        for env_index, writer in enumerate(self.writers):
            writer.start(first[env_index])

    def act(self, observations: Any, temperature: float) -> np.ndarray:
        """The actions of one batched search (with root noise: its visits are policy targets), recorded in the
        writers (under delay, as the target of the step the search was rooted at, with ``forecast_policy="store"``).
        """
        decision = self.policy.act(
            obs_as_tensor(observations, self.policy.device), deterministic=False, add_noise=True,
            temperature=temperature,
        )
        for env_index, writer in enumerate(self.writers):
            offset = int(decision.root_offsets[env_index])
            if offset == 0 or self.config.forecast_policy == "store":
                writer.record_search(decision.policy[env_index], offset)
        return decision.actions

    def store(
        self, actions: np.ndarray, new_obs: Any, rewards: np.ndarray, dones: np.ndarray, infos: list[dict[str, Any]]
    ) -> list[GameSegment]:
        """Write one vector step (the stored action: executed or decided; the learning reward; the newest frame);
        return the segments it finished."""
        finished = []
        learning_rewards = self.config.learning_rewards(rewards)
        next_part = observation_part(new_obs)
        for env_index, writer in enumerate(self.writers):
            info = infos[env_index]
            action = actions[env_index]
            if self.config.replay_actions == "executed":
                action = info.get("executed_action", action)
            reward = float(learning_rewards[env_index])
            if dones[env_index]:
                final = observation_part(info["terminal_observation"])
                truncated = bool(info.get("TimeLimit.truncated", False))
                segment = writer.step(int(action), reward, final, not truncated, truncated)
            else:
                segment = writer.step(int(action), reward, next_part[env_index], False, False)
            if segment is not None:
                finished.append(segment)
            if dones[env_index]:
                writer.start(next_part[env_index])
        return finished

    def unfinished(self) -> list[GameSegment]:
        """The running episodes' transitions, as segments (for a saved replay)."""
        return [segment for writer in self.writers if (segment := writer.unfinished()) is not None]
