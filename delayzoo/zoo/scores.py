"""Atari 100k reference scores, human-normalised scores and their aggregates with bootstrap intervals.

The random and human scores of the 26 games are in ``delayzoo/zoo/data/atari_100k_scores.csv``.
Aggregates follow Agarwal et al. (2021, "Deep RL at the edge of the statistical precipice"): the mean,
the median of the per-game means, and the interquartile mean (IQM: the mean of the middle 50% of all
run x game scores); confidence intervals come from a stratified bootstrap that resamples the runs of
each game with replacement.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from importlib import resources

import numpy as np

__all__ = [
    "AGGREGATES",
    "atari_game",
    "bootstrap_interval",
    "human_normalized",
    "interquartile_mean",
    "reference_scores",
]


@lru_cache(maxsize=1)
def reference_scores() -> dict[str, tuple[float, float]]:
    """``{game: (random, human)}`` for the 26 Atari 100k games."""
    text = resources.files("delayzoo.zoo").joinpath("data/atari_100k_scores.csv").read_text()
    rows = csv.DictReader(line for line in text.splitlines() if line and not line.startswith("#"))
    return {row["game"]: (float(row["random"]), float(row["human"])) for row in rows}


def atari_game(env_id: str) -> str | None:
    """The Atari 100k game of an env id (``ALE/Pong-v5``, ``PongNoFrameskip-v4`` -> ``Pong``), or ``None``
    (other namespaces, such as ``MinAtar/Breakout-v1``, are not Atari games)."""
    namespace, _, game = env_id.rpartition("/")
    if namespace not in ("", "ALE"):
        return None
    name = re.sub(r"(NoFrameskip|Deterministic)?-v\d+$", "", game)
    return name if name in reference_scores() else None


def human_normalized(game: str, score: float | np.ndarray) -> float | np.ndarray:
    """``(score - random) / (human - random)`` for an Atari 100k game."""
    if game not in reference_scores():
        raise ValueError(
            f"no reference scores for game {game!r}; the Atari 100k games are {sorted(reference_scores())}"
        )
    random, human = reference_scores()[game]
    return (np.asarray(score, dtype=float) - random) / (human - random)


def interquartile_mean(scores: Sequence[float] | np.ndarray) -> float:
    """The mean of the scores left after dropping the lowest and highest 25% (``int(0.25 n)`` each side)."""
    values = np.sort(np.asarray(scores, dtype=float).reshape(-1))
    if values.size == 0:
        raise ValueError("interquartile_mean needs at least one score")
    cut = int(0.25 * values.size)
    return float(values[cut : values.size - cut].mean())


def _mean(per_game: Mapping[str, np.ndarray]) -> float:
    return float(np.mean([runs.mean() for runs in per_game.values()]))


def _median(per_game: Mapping[str, np.ndarray]) -> float:
    return float(np.median([runs.mean() for runs in per_game.values()]))


def _iqm(per_game: Mapping[str, np.ndarray]) -> float:
    return interquartile_mean(np.concatenate(list(per_game.values())))


AGGREGATES: dict[str, Callable[[Mapping[str, np.ndarray]], float]] = {"mean": _mean, "median": _median, "IQM": _iqm}
"""Aggregate metrics of ``{game: array of per-run scores}``."""


def bootstrap_interval(
    per_game: Mapping[str, Sequence[float] | np.ndarray],
    metric: Callable[[Mapping[str, np.ndarray]], float],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[float, float, float]:
    """``(estimate, low, high)`` of ``metric`` with a stratified percentile bootstrap over each game's runs.

    :param per_game: ``{game: per-run scores}`` (each game at least one run)
    :param metric: one of :data:`AGGREGATES`' values, or any function of such a mapping
    :param n_resamples: bootstrap resamples
    :param confidence: coverage of the interval
    :param seed: seed of the resampling
    """
    games = {game: np.asarray(runs, dtype=float).reshape(-1) for game, runs in per_game.items()}
    if not games or any(runs.size == 0 for runs in games.values()):
        sizes = {game: runs.size for game, runs in games.items()}
        raise ValueError(f"bootstrap_interval needs at least one run per game, got run counts {sizes}")
    rng = np.random.default_rng(seed)
    estimates = np.empty(n_resamples)
    for index in range(n_resamples):
        resampled = {game: runs[rng.integers(0, runs.size, runs.size)] for game, runs in games.items()}
        estimates[index] = metric(resampled)
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(estimates, [tail, 100.0 - tail])
    return metric(games), float(low), float(high)
