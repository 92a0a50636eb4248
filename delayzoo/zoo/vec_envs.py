"""The vector envs of the zoo's commands: one module builds them for train, eval, enjoy and random play.

:func:`make_ranked_env` is one env of a run (:func:`~delayzoo.zoo.envs.make_zoo_env`, its action space seeded, the
entry's ``env_wrapper`` on top); :func:`split_frame_stack` says where an entry's frame stacking happens and
:func:`stack_and_transpose` does SB3's part of it; :func:`make_eval_env` rebuilds a trained run's env as it was
trained, for evaluating, watching or playing it at random.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec
from rl_zoo3.utils import get_wrapper_class
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv, VecFrameStack, VecNormalize, VecTransposeImage

from delayzoo.zoo.checkpoints import load_normalization
from delayzoo.zoo.delay_settings import DelaySettings
from delayzoo.zoo.envs import env_kind, make_zoo_env
from delayzoo.zoo.errors import ZooError
from delayzoo.zoo.runs import Run
from delayzoo.zoo.trust import check_names

__all__ = ["make_eval_env", "make_ranked_env", "split_frame_stack", "stack_and_transpose"]


def make_ranked_env(
    env_id: str | EnvSpec,
    delay: DelaySettings,
    monitor_file: str | None,
    pixels: bool,
    wrapper: Callable[[gym.Env], gym.Env] | None,
    env_kwargs: dict[str, Any],
    action_seed: int | None,
    monitor_kwargs: dict[str, Any] | None = None,
) -> gym.Env:
    """One env of a vector env: :func:`make_zoo_env`, its action space seeded, the YAML's ``env_wrapper`` on top."""
    env = make_zoo_env(
        env_id, delay, monitor_file=monitor_file, pixels=pixels, monitor_kwargs=monitor_kwargs, **env_kwargs
    )
    if action_seed is not None:
        env.action_space.seed(action_seed)
    return env if wrapper is None else wrapper(env)


def split_frame_stack(
    env_id: str, frame_stack: int | None, env_kwargs: dict[str, Any]
) -> tuple[int | None, dict[str, Any]]:
    """Where an entry's ``frame_stack`` is done: ``(frames for VecFrameStack, env kwargs)``.

    Atari envs stack their frames themselves (``make_atari(frame_stack=N)``, channels-first, below the
    pending view), so that ``--pending-view`` and the delay flags work with every algorithm; other envs
    keep SB3's ``VecFrameStack``.
    """
    if frame_stack and env_kind(env_id) == "atari":
        return None, {**env_kwargs, "frame_stack": frame_stack}
    return frame_stack, env_kwargs


def stack_and_transpose(env: VecEnv, frame_stack: int | None, verbose: int = 0) -> VecEnv:
    """Stack ``frame_stack`` frames (if given) and put image channels first, as SB3's CNNs expect."""
    if frame_stack:
        env = VecFrameStack(env, frame_stack)
        if verbose > 0:
            print(f"Stacking {frame_stack} frames")
    space = env.observation_space
    parts = space.spaces.values() if isinstance(space, gym.spaces.Dict) else [space]
    if any(
        isinstance(part, gym.spaces.Box) and is_image_space(part) and not is_image_space_channels_first(part)
        for part in parts
    ):
        env = VecTransposeImage(env)
    return env


def make_eval_env(
    run: Run, n_envs: int = 1, render_mode: str | None = None, trust_run_files: bool = False
) -> VecEnv:
    """The run's env, rebuilt as it was trained, without monitor files and with frozen normalisation.

    :param run: the run
    :param n_envs: envs side by side
    :param render_mode: ``"human"`` or ``"rgb_array"`` to render (``enjoy``, ``record_video``), ``None``: no rendering
    :param trust_run_files: import any ``env_wrapper`` name of ``config.yml`` and unpickle a
        ``vecnormalize.pkl`` (otherwise: names under the zoo's allow-list only, ``.npz`` statistics only)
    """
    wrappers = run.env_wrappers()  # the zoo's own replay entry (for rl_zoo3's tools) is left out
    check_names({**run.config, "env_wrapper": wrappers}, str(run.params_path / "config.yml"), trust_run_files)
    wrapper = get_wrapper_class({"env_wrapper": wrappers})
    frame_stack, env_kwargs = split_frame_stack(run.env_id, run.config.get("frame_stack"), run.env_kwargs())
    if render_mode is not None:
        env_kwargs = {**env_kwargs, "render_mode": render_mode}
    makers: list[Callable[[], gym.Env]] = [
        partial(
            make_ranked_env,
            run.env_id,
            run.delay_settings(),
            None,
            bool(run.args.get("pixels", False)),
            wrapper,
            dict(env_kwargs),
            None,
        )
        for _ in range(n_envs)
    ]
    env: VecEnv = DummyVecEnv(makers)
    statistics, pickled = run.params_path / "vecnormalize.npz", run.params_path / "vecnormalize.pkl"
    if statistics.is_file():
        env = load_normalization(statistics, env, training=False)
    elif pickled.is_file():
        if not trust_run_files:
            env.close()
            raise ZooError(
                f"{pickled} is a pickle, and loading it could run code; pass --trust-run-files if you trust this run"
            )
        env = VecNormalize.load(str(pickled), env)
        env.training = False
        env.norm_reward = False
    return stack_and_transpose(env, frame_stack)
