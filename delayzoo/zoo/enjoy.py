"""Watch a trained agent of a zoo run, in the env it was trained in: rl_zoo3's ``enjoy`` for every zoo run.

::

    python -m delayzoo.zoo.enjoy --algo pwm --env CartPole-v1 -f logs -n 1000
    python -m delayzoo.zoo.record_video --algo ppo --env ALE/Pong-v5 -f logs -n 1000 -o videos

The env is rebuilt from the run's files exactly as :mod:`delayzoo.zoo.eval` does (factory, env keywords,
execution delay and pending view, ``env_wrapper``, frame stack, frozen normalisation), so the agent
plays under the delay it was trained with. rl_zoo3's own ``enjoy`` and ``record_video`` replay the zoo's
runs of plain Gymnasium envs the same way (the run's ``config.yml`` names the delay wrappers), but not
our agents (``pwm``, ``delayed_ez``) nor ALE and DeepMind Control runs, whose envs come from
delayzoo's factories: these tools do.

The flags are rl_zoo3's (``-n`` steps, ``--n-envs``, ``--exp-id``, ``--load-best``,
``--load-checkpoint``, ``--load-last-checkpoint``, ``--deterministic``/``--stochastic``, ``--no-render``,
``--gym-packages``...); ``-f`` defaults to ``logs``. Every finished episode's score (whole games: the
monitor sits below the delay and life-loss wrappers) is printed, then their mean.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from delayzoo.zoo.algos import load_algorithm
from delayzoo.zoo.envs import check_env_id, env_kind, import_gym_packages
from delayzoo.zoo.errors import ZooError, run_command
from delayzoo.zoo.eval import load_for_acting
from delayzoo.zoo.flags import check_device_flag, set_threads_flag
from delayzoo.zoo.runs import Run, select_run
from delayzoo.zoo.vec_envs import make_eval_env

__all__ = ["enjoy", "main", "model_path", "parser"]


def model_path(run: Run, load_best: bool = False, checkpoint: int | None = None, last_checkpoint: bool = False) -> Path:
    """The model file to play, chosen as rl_zoo3's flags choose it (default: the final model).

    :raise ZooError: when that file does not exist
    """
    if load_best:
        path = run.path / "best_model.zip"
    elif checkpoint is not None:
        path = run.path / f"rl_model_{checkpoint}_steps.zip"
    elif last_checkpoint:
        checkpoints = run.checkpoints()
        if not checkpoints:
            raise ZooError(f"run {run.path} has no checkpoint (rl_model_<steps>_steps.zip)")
        path = checkpoints[-1][1]
    else:
        path = run.final_model
    if not path.is_file():
        raise ZooError(f"no model {path.name} in run {run.path}")
    return path


def enjoy(
    run: Run,
    path: Path,
    n_timesteps: int = 1000,
    n_envs: int = 1,
    seed: int = 0,
    deterministic: bool | None = None,
    render: bool = True,
    video_folder: Path | None = None,
    device: str = "auto",
) -> list[float]:
    """Play ``n_timesteps`` steps of the model at ``path`` in the run's env; return the finished episodes' scores.

    :param run: the run
    :param path: the model file (:func:`model_path`)
    :param n_timesteps: steps to play (per env)
    :param n_envs: envs side by side
    :param seed: seed of the first env (env ``i``: ``seed + i``)
    :param deterministic: greedy actions; ``None``: greedy except on Atari (rl_zoo3's rule)
    :param render: show the env (``render_mode="human"``); ignored when recording
    :param video_folder: record the first ``n_timesteps`` steps to an mp4 file there instead of showing them
    :param device: torch device of the model
    """
    if video_folder is not None:
        render_mode: str | None = "rgb_array"
    else:
        render_mode = "human" if render else None
    env = make_eval_env(run, n_envs=n_envs, render_mode=render_mode)
    if video_folder is not None:
        from stable_baselines3.common.vec_env import VecVideoRecorder

        prefix = f"{path.stem}-{run.algo}-{run.env_name}"
        env = VecVideoRecorder(env, str(video_folder), lambda step: step == 0, n_timesteps, name_prefix=prefix)
    if deterministic is None:
        deterministic = env_kind(run.env_id) != "atari"
    model = load_for_acting(load_algorithm(run.algo), path, device, run, env)
    scores: list[float] = []
    try:
        env.seed(seed)
        obs = env.reset()
        state = None
        episode_start = np.ones(env.num_envs, dtype=bool)
        for _ in range(n_timesteps):
            action, state = model.predict(
                obs,  # type: ignore[arg-type]  # a VecEnv's observations: arrays or dicts of arrays
                state=state,
                episode_start=episode_start,
                deterministic=deterministic,
            )
            obs, _, episode_start, infos = env.step(action)
            for info in infos:
                if "episode" in info:
                    scores.append(float(info["episode"]["r"]))
                    print(f"Episode score: {scores[-1]:.2f}, length {int(info['episode']['l'])}")
    except KeyboardInterrupt:
        pass
    finally:
        env.close()
    return scores


def parser(prog: str | None = None, record: bool = False) -> argparse.ArgumentParser:
    """The command line of ``enjoy`` (``record=True``: of ``record_video``)."""
    what = "Record a video of" if record else "Watch"
    parser = argparse.ArgumentParser(prog=prog, description=f"{what} a trained agent of a zoo run, in its own env.")
    parser.add_argument("--algo", required=True, help="algorithm of the run")
    parser.add_argument("--env", required=True, help="env id of the run")
    parser.add_argument("-f", "--folder", default="logs", help="log folder of the zoo (default: logs)")
    parser.add_argument("--exp-id", type=int, default=0, help="run number (default 0: the latest)")
    parser.add_argument("-n", "--n-timesteps", type=int, default=1000, help="steps to play (default 1000)")
    parser.add_argument("--n-envs", type=int, default=1, help="envs side by side (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the envs (default 0)")
    greedy = parser.add_mutually_exclusive_group()
    greedy.add_argument("--deterministic", dest="deterministic", action="store_const", const=True, help="greedy")
    greedy.add_argument("--stochastic", dest="deterministic", action="store_const", const=False, help="sampled")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--load-best", action="store_true", help="play best_model.zip")
    which.add_argument("--load-checkpoint", type=int, metavar="STEPS", help="play rl_model_<STEPS>_steps.zip")
    which.add_argument("--load-last-checkpoint", action="store_true", help="play the last checkpoint")
    if record:
        parser.add_argument("-o", "--output-folder", type=Path, help="video folder (default: <run>/videos)")
    else:
        parser.add_argument("--no-render", action="store_true", help="do not show the env (scores only)")
    parser.add_argument("--device", default="auto", help="torch device (default auto)")
    parser.add_argument(
        "--num-threads", type=int, default=-1, help="torch threads (default -1: torch's choice, one per core)"
    )
    parser.add_argument("--gym-packages", nargs="+", default=[], help="modules to import first (they register env ids)")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.enjoy", record: bool = False) -> int:
    """Run the enjoy command line (``record=True``: record_video); return the exit code (2 for bad input).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in help and errors
    :param record: record a video instead of showing the env
    """
    def work() -> None:
        args = parser(prog, record).parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.n_timesteps < 1 or args.n_envs < 1:
            raise ZooError(f"-n and --n-envs must be >= 1, got -n {args.n_timesteps} --n-envs {args.n_envs}")
        if args.seed < 0:
            raise ZooError(f"--seed must be >= 0 (Gymnasium's seeds are), got {args.seed}")
        load_algorithm(args.algo)
        check_device_flag(args.device)
        import_gym_packages(args.gym_packages)
        check_env_id(args.env)
        set_threads_flag(args.num_threads)
        run = select_run(args.folder, args.algo, args.env, args.exp_id)
        path = model_path(run, args.load_best, args.load_checkpoint, args.load_last_checkpoint)
        video_folder = (args.output_folder or run.path / "videos") if record else None
        print(f"Loading {path} ({run.delay_settings().label()})")
        scores = enjoy(
            run, path, args.n_timesteps, args.n_envs, args.seed, args.deterministic,
            render=not getattr(args, "no_render", True), video_folder=video_folder, device=args.device,
        )
        if scores:
            print(f"{len(scores)} episodes, mean score {np.mean(scores):.2f} +/- {np.std(scores):.2f}")
        if video_folder is not None:
            print(f"Video saved in {video_folder}")

    return run_command(prog, work)


if __name__ == "__main__":
    sys.exit(main())
