"""Random play: a uniform random policy played by the evaluation protocol at every delay of a study.

::

    python -m delayzoo.zoo.random_play -f docs/results/delay-benchmark

For each env and maximum delay of the runs under the log folder, it rebuilds the env of one of them
(the first by folder name; the delay process, filler actions and env wrappers are the same in every run
at that delay) as :mod:`delayzoo.zoo.eval` does, plays ``-n`` episodes (default 16, the study's) with
seeds ``--seed``, ``--seed + 1``, ... with actions drawn uniformly from a copy of the action space seeded
with ``--seed``, and writes ``<log folder>/random-play.csv`` (``env,delay,episode_0,...``, one row per
env and delay), which :mod:`delayzoo.zoo.plot` ``--by-delay`` draws as the reference line. The same runs
and flags give the same file.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from delayzoo.zoo.errors import ZooError, run_command
from delayzoo.zoo.runs import Run, find_runs

__all__ = ["RANDOM_PLAY", "RandomPolicy", "main", "parser", "play", "read_random_play", "run_delay"]

RANDOM_PLAY = "random-play.csv"
"""The file in a study's log folder that holds random play's episode returns per env and delay."""


def run_delay(run: Run) -> int:
    """The maximum delay a run was trained at, the one :mod:`delayzoo.zoo.plot` puts on its x axis: the
    execution delay's, else the observation delay's (0 without delay). Random play does not look at what it
    is shown, so under an observation delay alone it scores what it scores undelayed."""
    settings = run.delay_settings().resolved()
    shown = settings.execution if settings.execution.given else settings.observation
    return shown.delay or 0


class RandomPolicy:
    """Uniformly random actions, one per env, from a seeded copy of the action space (a model's ``predict``)."""

    def __init__(self, space: gym.Space[Any], n_envs: int, seed: int) -> None:
        self.space, self.n_envs = space, n_envs
        self.space.seed(seed)

    def predict(
        self, observation: Any, state: Any = None, episode_start: Any = None, deterministic: bool = False
    ) -> tuple[np.ndarray, Any]:
        """``(actions, state)`` as Stable-Baselines3's ``predict``; the observation is not looked at."""
        return np.array([self.space.sample() for _ in range(self.n_envs)]), state


def play(run: Run, n_episodes: int = 16, seed: int = 0) -> list[float]:
    """The returns of ``n_episodes`` episodes of random play in the run's env (episode ``k`` seeded ``seed + k``)."""
    from delayzoo.zoo.eval import evaluate_model
    from delayzoo.zoo.vec_envs import make_eval_env

    env = make_eval_env(run)
    try:
        policy = RandomPolicy(env.action_space, env.num_envs, seed)
        return evaluate_model(policy, env, [seed + episode for episode in range(n_episodes)], deterministic=False)
    finally:
        env.close()


def write_random_play(runs: Sequence[Run], path: Path, n_episodes: int = 16, seed: int = 0) -> Path:
    """Play every env and delay of ``runs`` at random and write the CSV (see the module docstring)."""
    first: dict[tuple[str, int], Run] = {}
    for run in sorted(runs, key=lambda run: str(run.path)):
        first.setdefault((run.env_id, run_delay(run)), run)
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["env", "delay", *[f"episode_{episode}" for episode in range(n_episodes)]])
        for (env_id, delay), run in sorted(first.items()):
            scores = play(run, n_episodes, seed)
            print(f"{env_id} at delay {delay} ({run.path.parents[1].name}): random play {np.mean(scores):.2f}")
            writer.writerow([env_id, delay, *[f"{score:g}" for score in scores]])
    return path


def read_random_play(log_folder: str | Path) -> dict[str, dict[int, list[float]]]:
    """``{env id: {delay: episode returns}}`` of ``<log folder>/random-play.csv`` (``{}`` without one)."""
    path = Path(log_folder) / RANDOM_PLAY
    if not path.is_file():
        return {}
    played: dict[str, dict[int, list[float]]] = {}
    with open(path, newline="") as handle:
        for row in list(csv.reader(handle))[1:]:
            try:
                played.setdefault(row[0], {})[int(row[1])] = [float(value) for value in row[2:]]
            except (IndexError, ValueError):
                raise ZooError(f"{path}: a row must be env,delay,returns..., got {row}") from None
    return played


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line of ``python -m delayzoo.zoo.random_play``."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("-f", "--log-folder", type=Path, required=True, help="the study's log folder")
    parser.add_argument("-n", "--n-episodes", type=int, default=16, help="episodes per env and delay (default 16)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode and of the actions")
    return parser


def main(argv: Sequence[str] | None = None, prog: str = "python -m delayzoo.zoo.random_play") -> int:
    """Run the command line; return the exit code (2 for bad input)."""
    def work() -> None:
        args = parser(prog).parse_args(list(sys.argv[1:] if argv is None else argv))
        if args.n_episodes < 1:
            raise ZooError(f"-n must be >= 1, got {args.n_episodes}")
        if args.seed < 0:
            raise ZooError(f"--seed must be >= 0 (Gymnasium's seeds are), got {args.seed}")
        runs = find_runs(args.log_folder)
        if not runs:
            raise ZooError(f"no zoo runs under {str(args.log_folder)!r}")
        print(f"Wrote {write_random_play(runs, args.log_folder / RANDOM_PLAY, args.n_episodes, args.seed)}")

    return run_command(prog, work)


if __name__ == "__main__":
    sys.exit(main())
