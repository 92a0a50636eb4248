"""Evaluate every checkpoint of a zoo run: one CSV row per checkpoint, one column per episode.

::

    python -m delayzoo.zoo.eval --algo ppo --env CartPole-v1 -f logs -n 10

takes the latest run of ``ppo`` on ``CartPole-v1`` under ``logs/`` (``--exp-id`` picks another,
``--all-runs`` takes every one), rebuilds its env exactly as it was trained (env keywords, delay
settings, frame stack, normalisation statistics), plays ``-n`` episodes with seeds ``--seed``,
``--seed + 1``, ... with each saved model (the ``rl_model_<steps>_steps.zip`` checkpoints and the final
model; ``--checkpoints last``: the final model only), and writes
``<log folder>/eval_result/<algo>/<run>.csv``: a header ``step,episode_0,...`` and one row per model.
Episodes are whole games (for Atari: all lives). It prints the mean and median per model
and, for the Atari 100k games, the human-normalised score of the mean.

``--n-envs K`` plays K episodes side by side, which batches the searches of DelayedEZ (much faster).
The same seeds and ``--n-envs`` give the same scores; agents that draw random numbers while acting
(searches, sampled actions) can score differently with another ``--n-envs``, since the envs of a batch
share the agent's generator.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv

from delayzoo.agents.common.plain_save import NotAModelFileError, PlainSaveMixin
from delayzoo.zoo.algos import load_algorithm
from delayzoo.zoo.envs import check_env_id, env_kind, import_gym_packages
from delayzoo.zoo.errors import ZooError, run_command
from delayzoo.zoo.flags import check_device_flag, set_threads_flag
from delayzoo.zoo.runs import Run, find_runs, select_run
from delayzoo.zoo.sb3_files import load_sb3_model
from delayzoo.zoo.scores import atari_game, human_normalized
from delayzoo.zoo.trust import parse_kwargs
from delayzoo.zoo.vec_envs import make_eval_env

__all__ = ["Actor", "evaluate_model", "evaluate_run", "load_for_acting", "main"]

_LOAD_WITHOUT_UNPICKLING = {"learning_rate": 0.0, "lr_schedule": lambda _: 0.0, "clip_range": lambda _: 0.0}
"""Saved training schedules of Stable-Baselines3 models are replaced instead of unpickled: evaluation
does not need them (our agents' files hold no pickles and are loaded as they are)."""


def load_for_acting(
    algorithm: type[BaseAlgorithm], path: str | Path, device: str, run: Run, env: VecEnv, trusted: bool = False
) -> BaseAlgorithm:
    """A saved model, to act with, loaded without unpickling: our agents' plain files as they are, SB3's
    through :mod:`delayzoo.zoo.sb3_files` (their training schedules are not needed to act), unless
    ``trusted``; a file that is refused becomes a :class:`ZooError` (exit code 2).

    :param algorithm: the run's algorithm class
    :param path: the model file
    :param device: torch device
    :param run: the run (its ``config.yml`` gives SB3 models' policy and ``policy_kwargs``)
    :param env: the env the model acts in
    :param trusted: load SB3's pickled entries as SB3 does (``--trust-run-files``)
    """
    if issubclass(algorithm, PlainSaveMixin):
        try:
            return algorithm.load(str(path), device=device)
        except NotAModelFileError as error:
            raise ZooError(str(error)) from None
    if trusted:
        return algorithm.load(str(path), device=device, custom_objects=_LOAD_WITHOUT_UNPICKLING)
    policy_kwargs = run.config.get("policy_kwargs")
    if isinstance(policy_kwargs, str):
        policy_kwargs = parse_kwargs(policy_kwargs, f"policy_kwargs in {run.params_path / 'config.yml'}")
    return load_sb3_model(algorithm, path, env, run.config.get("policy", "MlpPolicy"), policy_kwargs, device)


class Actor(Protocol):
    """What :func:`evaluate_model` plays: anything with a Stable-Baselines3 model's ``predict``."""

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> tuple[Any, Any]:
        """``(actions, state)`` for a batch of observations."""


def evaluate_model(model: Actor, env: VecEnv, seeds: Sequence[int], deterministic: bool) -> list[float]:
    """The score of one whole episode per seed (``info["episode"]["r"]`` of the env's monitor).

    Episodes run ``env.num_envs`` at a time; env ``i`` of a batch is reset with the batch's ``i``-th seed.
    The policy's recurrent state restarts at episode ends and at life losses (``info["life_loss"]``).

    :param model: any SB3-style model (``predict`` with ``state`` and ``episode_start``), or random play
    :param env: the vector env from :func:`make_eval_env`
    :param seeds: consecutive integers, one per episode
    :param deterministic: greedy actions
    """
    scores: list[float] = []
    for start in range(0, len(seeds), env.num_envs):
        batch = list(seeds[start : start + env.num_envs])
        env.seed(batch[0])
        obs = env.reset()
        state = None
        episode_start = np.ones(env.num_envs, dtype=bool)
        results: list[float | None] = [None] * len(batch)
        while any(result is None for result in results):
            action, state = model.predict(
                obs,
                state=state,
                episode_start=episode_start,
                deterministic=deterministic,
            )
            obs, _, dones, infos = env.step(action)
            # A life loss restarts recurrent state as in training (PWM), while the game goes on.
            episode_start = np.asarray(dones, dtype=bool) | np.array([bool(i.get("life_loss", False)) for i in infos])
            for index, info in enumerate(infos[: len(batch)]):
                if results[index] is None and "episode" in info:
                    results[index] = float(info["episode"]["r"])
        scores.extend(float(result) for result in results if result is not None)
    return scores


def evaluate_run(
    run: Run,
    n_episodes: int = 10,
    seed: int = 0,
    checkpoints: str = "all",
    deterministic: bool | None = None,
    device: str = "auto",
    n_envs: int = 1,
    output: Path | None = None,
    trust_run_files: bool = False,
) -> tuple[Path, list[tuple[int, list[float]]]]:
    """Evaluate the models of a run and write the CSV (see the module docstring).

    :param run: the run (:func:`delayzoo.zoo.runs.select_run`)
    :param n_episodes: episodes per model
    :param seed: seed of the first episode (episode ``k`` uses ``seed + k``)
    :param checkpoints: ``"all"`` (checkpoints and final model) or ``"last"`` (final model)
    :param deterministic: greedy actions; ``None``: greedy except on Atari (rl_zoo3's rule)
    :param device: torch device of the models
    :param n_envs: episodes played side by side
    :param output: the CSV file (default ``<log folder>/eval_result/<algo>/<run>.csv``)
    :param trust_run_files: see :func:`make_eval_env`
    :return: the CSV path and ``[(step, scores)]``
    """
    algorithm = load_algorithm(run.algo)
    if deterministic is None:
        deterministic = env_kind(run.env_id) != "atari"
    seeds = [seed + episode for episode in range(n_episodes)]
    env = make_eval_env(run, n_envs=min(n_envs, n_episodes), trust_run_files=trust_run_files)
    rows = []
    try:
        models = run.checkpoints() if checkpoints == "all" else []
        if run.final_model.is_file():
            final_steps = load_for_acting(algorithm, run.final_model, "cpu", run, env, trust_run_files).num_timesteps
            models = [(steps, path) for steps, path in models if steps != final_steps]
            models.append((final_steps, run.final_model))
        if not models:
            raise ZooError(f"run {run.path} has no saved model (neither {run.final_model.name} nor checkpoints)")
        for steps, path in sorted(models, key=lambda item: item[0]):
            model = load_for_acting(algorithm, path, device, run, env, trust_run_files)
            rows.append((steps, evaluate_model(model, env, seeds, deterministic)))
    finally:
        env.close()
    output = output or run.eval_csv
    output.parent.mkdir(parents=True, exist_ok=True)
    with open(output, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", *[f"episode_{episode}" for episode in range(n_episodes)]])
        for steps, scores in rows:
            writer.writerow([steps, *[f"{score:g}" for score in scores]])
    return output, rows


def _report(run: Run, rows: list[tuple[int, list[float]]]) -> str:
    game = atari_game(run.env_id)
    lines = [f"{run.algo} on {run.env_id} ({run.delay_settings().label()}), run {run.name}:"]
    for steps, scores in rows:
        mean, median = float(np.mean(scores)), float(np.median(scores))
        line = f"  step {steps:>9}: mean {mean:10.2f}  median {median:10.2f}  ({len(scores)} episodes)"
        if game is not None:
            line += f"  human-normalised {float(human_normalized(game, mean)):.3f}"
        lines.append(line)
    return "\n".join(lines)


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line of ``delayzoo eval``."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("--algo", required=True, help="algorithm of the run")
    parser.add_argument("--env", required=True, help="env id of the run")
    parser.add_argument("-f", "--log-folder", default="logs", help="log folder of the zoo (default: logs)")
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument("--exp-id", type=int, default=0, help="run number (default 0: the latest)")
    runs.add_argument("--all-runs", action="store_true", help="every run of the algorithm on the env, one CSV each")
    parser.add_argument("-n", "--n-episodes", type=int, default=10, help="episodes per model (default 10)")
    parser.add_argument(
        "--gym-packages", nargs="+", default=[], help="modules to import first (they register the env ids)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    parser.add_argument(
        "--checkpoints", choices=("all", "last"), default="all", help="all checkpoints, or the final model only"
    )
    greedy = parser.add_mutually_exclusive_group()
    greedy.add_argument("--deterministic", dest="deterministic", action="store_const", const=True, help="greedy")
    greedy.add_argument("--stochastic", dest="deterministic", action="store_const", const=False, help="sampled")
    parser.add_argument("--device", default="auto", help="torch device (default auto)")
    parser.add_argument(
        "--num-threads", type=int, default=-1, help="torch threads (default -1: torch's choice, one per core)"
    )
    parser.add_argument("--n-envs", type=int, default=1, help="episodes played side by side (default 1)")
    parser.add_argument(
        "-o", "--output", type=Path, help="CSV file; default: <log folder>/eval_result/<algo>/<run>.csv"
    )
    parser.add_argument(
        "--trust-run-files",
        action="store_true",
        help="import any env_wrapper name of the run's config.yml, unpickle its vecnormalize.pkl and the "
        "pickled entries of Stable-Baselines3 model files (only for run folders you trust)",
    )
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.eval") -> int:
    """Run the eval command line; return the exit code (2 for bad input).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    :param prog: the program name shown in help and errors
    """
    def work() -> None:
        args = parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.n_episodes < 1 or args.n_envs < 1:
            raise ZooError(f"-n and --n-envs must be >= 1, got -n {args.n_episodes} --n-envs {args.n_envs}")
        if args.seed < 0:
            raise ZooError(f"--seed must be >= 0 (Gymnasium's seeds are), got {args.seed}")
        load_algorithm(args.algo)
        check_device_flag(args.device)
        set_threads_flag(args.num_threads)
        import_gym_packages(args.gym_packages)
        check_env_id(args.env)
        if args.all_runs and args.output is not None:
            raise ZooError("--all-runs writes one CSV per run: leave out -o")
        runs = find_runs(args.log_folder, [args.algo], [args.env]) if args.all_runs else []
        runs = runs or [select_run(args.log_folder, args.algo, args.env, args.exp_id)]
        for run in runs:
            output, rows = evaluate_run(
                run, args.n_episodes, args.seed, args.checkpoints, args.deterministic, args.device, args.n_envs,
                args.output, args.trust_run_files,
            )
            print(_report(run, rows))
            print(f"Wrote {output}")

    return run_command(prog, work)


if __name__ == "__main__":
    sys.exit(main())
