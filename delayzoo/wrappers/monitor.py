"""Episode statistics that survive Gymnasium's ``env.spec`` round trip.

This module imports Stable-Baselines3 (and so torch): :class:`EpisodeMonitor` *is* an SB3 ``Monitor``,
so that SB3 algorithms add none of their own. ``delayzoo.wrappers`` loads it only when it is used.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from stable_baselines3.common.monitor import Monitor


class EpisodeMonitor(Monitor, gym.utils.RecordConstructorArgs):
    """SB3's ``Monitor`` (``info["episode"]`` with ``"r"``, ``"l"``, ``"t"``, optional CSV file),
    recorded in ``env.spec`` so that ``env.spec.make()`` and Gymnasium's ``check_env`` can rebuild it.

    SB3 algorithms see it as a ``Monitor`` and add none of their own. The factories put it below
    the life-loss and delay wrappers, so the statistics are per game.

    Example:
        >>> env = EpisodeMonitor(gym.make("CartPole-v1"))
        >>> env.spec.make().__class__.__name__
        'EpisodeMonitor'

    :param env: the environment
    :param filename: CSV file for the statistics (``.monitor.csv`` is appended), or ``None``
    :param allow_early_resets: allow ``reset()`` before the episode ends
    :param reset_keywords: extra ``reset()`` keywords to log
    :param info_keywords: extra ``info`` keys to log at the end of an episode
    """

    def __init__(
        self,
        env: gym.Env,
        filename: str | None = None,
        allow_early_resets: bool = True,
        reset_keywords: tuple[str, ...] = (),
        info_keywords: tuple[str, ...] = (),
    ) -> None:
        gym.utils.RecordConstructorArgs.__init__(
            self,
            filename=filename,
            allow_early_resets=allow_early_resets,
            reset_keywords=reset_keywords,
            info_keywords=info_keywords,
        )
        Monitor.__init__(
            self,
            env,
            filename=filename,
            allow_early_resets=allow_early_resets,
            reset_keywords=reset_keywords,
            info_keywords=info_keywords,
        )



def add_episode_monitor(env: gym.Env, monitor: bool | str | dict[str, Any]) -> gym.Env:
    """``env`` under an :class:`EpisodeMonitor` as the factories' ``monitor=`` argument asks.

    :param env: the environment
    :param monitor: ``False`` (no monitor), ``True`` (no file), a CSV file name, or the monitor's keywords
        (``filename``, ``info_keywords``, ...; rl_zoo3's ``monitor_kwargs``)
    :return: the environment, monitored or not
    """
    if monitor is False:
        return env
    if monitor is True:
        return EpisodeMonitor(env)
    if isinstance(monitor, str):
        return EpisodeMonitor(env, filename=monitor)
    if isinstance(monitor, dict):
        return EpisodeMonitor(env, **monitor)
    raise TypeError(f"monitor must be a bool, a file name or a dict of EpisodeMonitor keywords, got {monitor!r}")
