"""Atari 100k reference scores, human-normalised scores, IQM and the stratified bootstrap, and the summary table."""

from __future__ import annotations

import csv
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from delayzoo.zoo.plot import atari_table
from delayzoo.zoo.runs import Run
from delayzoo.zoo.scores import (
    AGGREGATES,
    atari_game,
    bootstrap_interval,
    human_normalized,
    interquartile_mean,
    reference_scores,
)


def test_reference_table_holds_the_26_games_with_human_above_random():
    import ale_py

    gym.register_envs(ale_py)
    scores = reference_scores()
    assert len(scores) == 26
    assert all(human > random for random, human in scores.values())
    assert all(f"ALE/{game}-v5" in gym.registry for game in scores)
    assert scores["Pong"] == (-20.7, 14.6) and scores["Breakout"] == (1.7, 30.5)


def test_human_normalised_score_is_0_at_random_and_1_at_human():
    random, human = reference_scores()["Seaquest"]
    np.testing.assert_allclose(human_normalized("Seaquest", [random, human, 2 * human - random]), [0.0, 1.0, 2.0])
    with pytest.raises(ValueError, match="no reference scores for game 'Tetris'"):
        human_normalized("Tetris", 1.0)


@pytest.mark.parametrize(
    "env_id, game", [("ALE/Pong-v5", "Pong"), ("PongNoFrameskip-v4", "Pong"), ("ALE/MsPacman-v5", "MsPacman"),
                     ("ALE/Tetris-v5", None), ("CartPole-v1", None), ("MinAtar/Breakout-v1", None),
                     ("MinAtar/Seaquest-v0", None)]
)
def test_env_ids_map_to_their_atari_100k_game(env_id, game):
    assert atari_game(env_id) == game


def test_interquartile_mean_drops_a_quarter_on_each_side():
    assert interquartile_mean([8, 1, 7, 2, 6, 3, 5, 4]) == 4.5  # mean of 3, 4, 5, 6
    values = np.random.default_rng(0).normal(size=103)
    middle = np.sort(values)[25:78]
    assert interquartile_mean(values) == pytest.approx(middle.mean())
    assert interquartile_mean([2.0]) == 2.0


def test_aggregates_of_per_game_runs():
    per_game = {"A": np.array([0.0, 2.0]), "B": np.array([4.0]), "C": np.array([10.0, 10.0, 10.0])}
    assert AGGREGATES["mean"](per_game) == pytest.approx(5.0)  # mean of game means 1, 4, 10
    assert AGGREGATES["median"](per_game) == 4.0
    assert AGGREGATES["IQM"](per_game) == pytest.approx(np.mean([2.0, 4.0, 10.0, 10.0]))  # 6 scores, drop 1 per side


def test_bootstrap_interval_brackets_the_estimate_and_collapses_without_spread():
    rng = np.random.default_rng(1)
    per_game = {game: rng.normal(loc, 1.0, size=5) for game, loc in zip("ABCDEF", range(6))}
    estimate, low, high = bootstrap_interval(per_game, AGGREGATES["mean"], n_resamples=500, seed=0)
    assert low < estimate < high and high - low < 2.0
    assert bootstrap_interval(per_game, AGGREGATES["mean"], n_resamples=500, seed=0) == (estimate, low, high)
    single = {"A": [1.0], "B": [3.0]}
    assert bootstrap_interval(single, AGGREGATES["IQM"], n_resamples=50) == (2.0, 2.0, 2.0)


def _evaluated_run(folder: Path, game: str, run_id: int, rows: list[list[float]]) -> Run:
    path = folder / "pwm" / f"ALE-{game}-v5_{run_id}"
    path.mkdir(parents=True)
    eval_csv = folder / "eval_result" / "pwm" / f"{path.name}.csv"
    eval_csv.parent.mkdir(parents=True, exist_ok=True)
    with open(eval_csv, "w", newline="") as handle:
        csv.writer(handle).writerows([["step", "episode_0", "episode_1"], *rows])
    return Run(path=path, algo="pwm", env_id=f"ALE/{game}-v5", args={"delay": None}, config={})


def test_atari_table_uses_the_final_models_mean_score_per_run(tmp_path):
    random, human = reference_scores()["Pong"]
    runs = [
        _evaluated_run(tmp_path, "Pong", 1, [[1000, -21, -21], [100000, random, human]]),  # HNS 0.5
        _evaluated_run(tmp_path, "Pong", 2, [[100000, human, human]]),  # HNS 1
        _evaluated_run(tmp_path, "Boxing", 1, [[100000, 0.1, 0.1]]),  # HNS 0
    ]
    table = atari_table(runs, n_resamples=200)
    cells = [cell.strip() for cell in table.splitlines()[2].split("|")[1:-1]]
    assert cells[:3] == ["pwm (no delay)", "2/26", "3"]
    # per game: Pong runs 0.5 and 1 (mean 0.75), Boxing 0; IQM over the three run scores keeps all three
    assert [cell.split(" [")[0] for cell in cells[3:]] == ["0.375", "0.375", "0.500"]
    assert "| Pong | -20.7 | 14.6 | 5.8 |" in table and "| Boxing | 0.1 | 12.1 | 0.1 |" in table
    assert atari_table([_evaluated_run(tmp_path / "none", "Pong", 3, [])]) is None
