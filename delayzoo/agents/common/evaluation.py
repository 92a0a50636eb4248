"""Evaluation of recurrent agents on games with lives: restart the agent's state at every life loss.

PWM restarts its recurrent state after a life loss while it trains (as the PaMoRL reference does in
training and evaluation), but SB3's ``evaluate_policy`` (and so ``EvalCallback``) passes
``episode_start = dones`` to ``predict``: a life loss, which does not end the game, would carry the
state over. :class:`LifeLossEpisodeStarts` reports those steps as episode starts; :func:`evaluate_policy`
is SB3's function on an env wrapped that way::

    from delayzoo.agents.common.evaluation import LifeLossEpisodeStarts, evaluate_policy

    mean, std = evaluate_policy(model, eval_env, n_eval_episodes=10)           # drop-in for SB3's
    callback = EvalCallback(LifeLossEpisodeStarts(eval_env), eval_freq=10_000)  # SB3's callback

Scores stay per game as long as a ``Monitor`` sits below the life-loss wrapper (``make_atari`` and the
zoo's envs do): SB3 counts an episode only where the monitor reports one.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from stable_baselines3.common import evaluation
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecEnvWrapper, VecMonitor, is_vecenv_wrapped
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn


class LifeLossEpisodeStarts(VecEnvWrapper):
    """Report ``done=True`` where ``info["life_loss"]`` is set, without resetting the env.

    Evaluation loops that restart a policy's recurrent state where ``done`` (SB3's ``evaluate_policy``,
    ``EvalCallback``) then restart it at every life loss too. Only for evaluation: training loops would
    also cut the return there.

    :param venv: the vector env; a ``Monitor`` (or ``VecMonitor``) should sit below, so that scores stay
        whole games (a warning says so otherwise).
    """

    def __init__(self, venv: VecEnv) -> None:
        super().__init__(venv)
        monitored = is_vecenv_wrapped(venv, VecMonitor) or venv.env_is_wrapped(Monitor)[0]
        if not monitored:
            warnings.warn(
                "LifeLossEpisodeStarts: the env has no Monitor below it, so evaluate_policy would score each "
                "life as an episode; wrap the base env in stable_baselines3.common.monitor.Monitor",
                stacklevel=2,
            )

    def reset(self) -> Any:
        return self.venv.reset()

    def step_wait(self) -> VecEnvStepReturn:
        obs, rewards, dones, infos = self.venv.step_wait()
        life_loss = np.array([bool(info.get("life_loss", False)) for info in infos])
        return obs, rewards, np.asarray(dones, dtype=bool) | life_loss, infos


def evaluate_policy(model: Any, env: Any, *args: Any, **kwargs: Any) -> Any:
    """SB3's ``evaluate_policy`` (same arguments and results), restarting the policy's state at life losses.

    :param model: the model (anything with SB3's ``predict``).
    :param env: a ``gymnasium.Env`` or a ``VecEnv`` (a plain env is wrapped in a ``DummyVecEnv``).
    """
    if not isinstance(env, VecEnv):
        env = DummyVecEnv([lambda: env])  # type: ignore[list-item, return-value]
    if not isinstance(env, LifeLossEpisodeStarts):
        env = LifeLossEpisodeStarts(env)
    return evaluation.evaluate_policy(model, env, *args, **kwargs)
