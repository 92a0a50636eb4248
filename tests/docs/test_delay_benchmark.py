"""The delay benchmark's committed results regenerate its committed figures and tables exactly.

``docs/results/delay-benchmark/`` holds each finished cell's record, configuration and evaluation CSV, and
random play's returns (``random-play.csv``); ``python -m delayzoo.zoo.plot --by-delay -f
docs/results/delay-benchmark -o <dir> --at-steps CartPole-v1=20000 --at-steps MinAtar/Breakout-v1=50000``
must draw the same pixels as the PNGs under ``docs/results/delay-benchmark-figures/`` (final return, equal
budget, learning curves; PNG metadata such as the matplotlib version aside) and write the same tables, byte
for byte, which ``docs/delay-benchmark.md`` shows.
"""

from __future__ import annotations

import json
import os
import shutil

import matplotlib.image
import numpy as np

from delayzoo.zoo import plot
from delayzoo.zoo.grid import load_grid
from delayzoo.zoo.random_play import read_random_play
from delayzoo.zoo.study import GRID
from tests.docs.blocks import REPO

RESULTS = REPO / "docs" / "results" / "delay-benchmark"
FIGURES = REPO / "docs" / "results" / "delay-benchmark-figures"
BUDGETS = ["--at-steps", "CartPole-v1=20000", "--at-steps", "MinAtar/Breakout-v1=50000"]


def _regenerates_the_committed_figures(results, output):
    assert plot.main(["--by-delay", "-f", str(results), "-o", str(output), *BUDGETS]) == 0
    committed = sorted(path.name for path in FIGURES.iterdir())
    assert sorted(path.name for path in output.iterdir()) == committed
    assert "CartPole-v1-curves.png" in committed and "MinAtar-Breakout-v1-at-50000-steps.png" in committed
    for table in ("by-delay.md", "at-steps.md"):
        assert (output / table).read_bytes() == (FIGURES / table).read_bytes(), f"{table} differs"
    for name in committed:
        if name.endswith(".png"):
            drawn, kept = matplotlib.image.imread(output / name), matplotlib.image.imread(FIGURES / name)
            assert drawn.shape == kept.shape and np.array_equal(drawn, kept), f"{name} differs from the committed one"


def test_the_committed_results_regenerate_the_committed_table_and_figures(tmp_path):
    _regenerates_the_committed_figures(RESULTS, tmp_path)


def test_the_figures_depend_on_the_committed_files_only_not_on_their_file_times(tmp_path):
    """A checkout where cells were deleted and rerun has other ``args.yml`` times than a fresh clone: the runs'
    scores are bootstrapped in the order of their seeds, whatever the times."""
    results = tmp_path / "results"
    shutil.copytree(RESULTS, results)
    rng = np.random.default_rng(0)
    for args in sorted(results.rglob("args.yml")):
        stamp = 1.7e9 + float(rng.integers(0, 10**6))
        os.utime(args, (stamp, stamp))
    output = tmp_path / "figures"
    output.mkdir()
    _regenerates_the_committed_figures(results, output)


def _means_by_agent(returns_table: str) -> dict[str, list[str]]:
    """Each row's agent and the mean of each of its cells ("488.5 [477.1, 500.0] (4)" gives "488.5")."""
    rows = [line.split(" | ") for line in returns_table.splitlines()[2:]]
    return {row[0][2:]: [cell.split(" ")[0] for cell in row[1:]] for row in rows}


def test_the_equal_budget_table_holds_every_cell_and_the_cartpole_numbers_read_from_the_csvs():
    """Every agent at 20k CartPole-v1 steps (the numbers read by hand from the CSVs, every agent over seeds
    0-4) and at 50k MinAtar/Breakout-v1 steps (seeds 0-2: undelayed, and PWM at
    5 and 10); every cell has its checkpoint at the grid's budget, PPO's included."""
    budgets = load_grid(GRID).budgets
    assert {env: budgets[env] for env in ("CartPole-v1", "MinAtar/Breakout-v1")} == {
        "CartPole-v1": 20000,
        "MinAtar/Breakout-v1": 50000,
    }
    table = (FIGURES / "at-steps.md").read_text()
    assert table.count("(not in the table): none.") == 2
    blocks = table.split("\n\n")
    rows = _means_by_agent(blocks[1])  # the returns of the CartPole-v1 section
    expected = {
        "pwm-forecast": ["490.8", "499.1", "498.8", "332.6"],
        "ppo+view": ["375.5", "353.3", "275.2", "132.7"],
        "dez-forward": ["452.7", "443.1", "495.1", "342.6"],
    }
    for agent, means in expected.items():
        assert rows[agent][:4] == means, agent
    rows = _means_by_agent(blocks[6])  # the returns of the MinAtar/Breakout-v1 section
    undelayed = {"pwm-forecast": "5.6", "dez-forward": "6.2", "ppo": "5.0"}  # PWM's conv-frames cells, seeds 0-2
    assert {agent: rows[agent][0] for agent in undelayed} == undelayed
    at_5 = {"pwm-forecast": "1.8", "pwm-oblivious": "0.6"}  # PWM's conv-frames cells at a maximum delay of 5
    assert {agent: rows[agent][1] for agent in at_5} == at_5
    at_10 = {"pwm-forecast": "0.7", "pwm-oblivious": "0.5"}  # and at 10 (35/48 and 23/48 over the 48 episodes)
    assert {agent: rows[agent][2] for agent in at_10} == at_10
    assert set(read_random_play(RESULTS)) == {"CartPole-v1", "MinAtar/Breakout-v1"}


def test_the_benchmark_page_shows_the_committed_tables_and_figures():
    page = (REPO / "docs" / "delay-benchmark.md").read_text()
    for name in ("by-delay.md", "at-steps.md"):
        tables = [block.strip() for block in (FIGURES / name).read_text().split("\n\n") if block.startswith("|")]
        assert tables and all(table in page for table in tables), f"the page lacks a table of {name}"
    for png in FIGURES.glob("*.png"):
        assert f"results/delay-benchmark-figures/{png.name}" in page


def test_the_pendulum_sac_rows_are_the_committed_evaluations_at_20k_and_18k():
    """Each SAC run of the Pendulum forecast study shows its mean return over 16 episodes at 20k and 18k."""
    page = (REPO / "docs" / "delay-benchmark.md").read_text()
    csvs = sorted((REPO / "docs" / "results" / "pwm-pendulum-forecast").glob("sac-*/eval_result/sac/*.csv"))
    assert len(csvs) == 6
    for path in csvs:
        table = np.loadtxt(path, delimiter=",", skiprows=1)
        mean = {int(row[0]): row[1:].mean() for row in table}
        assert table.shape[1] == 17
        assert f"20k: {mean[20000]:.1f} ({mean[18000]:.1f} at 18k)" in page, path


def test_the_pendulum_pwm_rows_are_the_committed_evaluations_and_forecast_errors():
    """Each PWM run of the Pendulum forecast study shows its mean return over 16 episodes at 20k and, in the
    script's column order, the mean return of each way of acting that ``pwm_forecast_error.py`` recorded."""
    page = (REPO / "docs" / "delay-benchmark.md").read_text()
    runs = sorted((REPO / "docs" / "results" / "pwm-pendulum-forecast").glob("fc5*"))
    assert len(runs) == 5
    for run in runs:
        table = np.loadtxt(run / "eval_result" / "pwm" / "Pendulum-v1_1.csv", delimiter=",", skiprows=1)
        at_20k = table[table[:, 0] == 20000, 1:].mean()
        returns = json.loads((run / "forecast-error.jsonl").read_text().splitlines()[-1])["returns"]
        modes = ("forecast16", "forecast1", "forecast0", "oracle", "current")
        columns = " | ".join(f"{np.mean(returns[mode]):.1f}" for mode in modes)
        rows = [line for line in page.splitlines() if f"{at_20k:.1f} | {columns} |" in line]
        assert len(rows) == 1, run.name


def test_the_results_heading_counts_the_committed_cells():
    page = (REPO / "docs" / "delay-benchmark.md").read_text()
    cells = len(list(RESULTS.glob("*/cell.yml")))
    assert f"### Results ({cells} cells)" in page
