"""plot --by-delay on a grid file's cells: variant lines, the shared delay-0 run, the kept fraction, the last
evaluations, the return at an equal budget (--at-steps, a grid file's budget and seeds), learning curves of
resumed runs, random play, and figures and tables that the same runs redraw exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from matplotlib import image

from delayzoo.zoo import plot
from delayzoo.zoo.grid import CELL_RECORD, Cell
from delayzoo.zoo.random_play import RANDOM_PLAY, read_random_play
from delayzoo.zoo.runs import find_runs


def fake_cell(logs: Path, cell: Cell, rows: list[list[float]], steps: list[int] | None = None) -> None:
    """A cell folder as a grid sweep leaves it without its models: record, args.yml, config.yml, eval CSV."""
    env_name = cell.name.split("_")[1]
    params = logs / cell.name / cell.algo / f"{env_name}_1" / env_name
    params.mkdir(parents=True)
    delay = f"delay: {cell.delay}\ndelay_process: {cell.process}\n" if cell.delay else "delay: null\n"
    (params / "args.yml").write_text(f"algo: {cell.algo}\nenv: {cell.env_id}\nseed: {cell.seed}\n{delay}")
    (params / "config.yml").write_text("n_timesteps: 300\n")
    (logs / cell.name / CELL_RECORD).write_text(yaml.safe_dump({**cell.record(), "cpu_seconds": {"train": 60.0}}))
    eval_csv = logs / cell.name / "eval_result" / cell.algo / f"{env_name}_1.csv"
    eval_csv.parent.mkdir(parents=True)
    steps = steps or [100 * (index + 1) for index in range(len(rows))]
    lines = ["step," + ",".join(f"episode_{index}" for index in range(len(rows[0])))]
    lines += [f"{step}," + ",".join(str(score) for score in row) for step, row in zip(steps, rows)]
    eval_csv.write_text("\n".join(lines) + "\n")


def _variant(label: str, algo: str, delay: int, seed: int, view: bool, aware: bool | None = None) -> Cell:
    return Cell(algo, "CartPole-v1", delay, "random-walk", view, seed, label, delay_aware=aware)


def _study(logs: Path) -> None:
    for seed, base in enumerate([100.0, 200.0]):
        fake_cell(logs, _variant("pwm", "pwm", 0, seed, False), [[0.0], [base], [base], [base]])
        fake_cell(logs, _variant("pwm-forecast", "pwm", 5, seed, True), [[base / 2], [base / 2], [base / 2]])
        fake_cell(logs, _variant("pwm-oblivious", "pwm", 5, seed, False), [[base / 10]] * 3)
        fake_cell(logs, _variant("dez-oblivious", "delayed_ez", 5, seed, True, aware=False), [[5.0]] * 3)


def test_variants_are_lines_sharing_their_algorithms_delay_0_run_with_the_fraction_they_keep(tmp_path):
    logs = tmp_path / "logs"
    _study(logs)
    lines = plot.delay_results(find_runs(logs))["CartPole-v1"]
    assert sorted(lines) == ["dez-oblivious", "pwm-forecast", "pwm-oblivious"]
    assert lines["pwm-forecast"].points == {0: [100.0, 200.0], 5: [50.0, 100.0]}  # last 3 of 0, b, b, b: b
    assert lines["pwm-oblivious"].points[0] == [100.0, 200.0] and lines["pwm-oblivious"].points[5] == [10.0, 20.0]
    assert lines["dez-oblivious"].points == {5: [5.0, 5.0]}  # no delay-0 run of delayed_ez
    assert (lines["pwm-forecast"].aware, lines["pwm-oblivious"].aware, lines["dez-oblivious"].aware) == (
        True,
        False,
        False,
    )
    assert {line.family for line in lines.values()} == {"pwm", "delayed_ez"}
    table = plot.delay_table(find_runs(logs), n_resamples=200)
    assert "| pwm-forecast | 150.0 [100.0, 200.0] (2) | 75.0 [50.0, 100.0] (2) |" in table
    assert "| agent | kept at 5 |" in table and plot.KEPT_WITHOUT_RANDOM_PLAY in table  # kept needs random play
    assert "| pwm-forecast |  |" in table and "| pwm-oblivious |  |" in table and "| dez-oblivious |  |" in table
    assert "last 3 evaluated models" in table
    # random play 30 undelayed and 15 at delay 5: pwm's undelayed margin is 150 - 30 = 120
    random = {"CartPole-v1": {0: [20.0, 40.0], 5: [15.0, 15.0]}}
    table = plot.delay_table(find_runs(logs), n_resamples=200, random=random)
    assert "| pwm-forecast | 50% |" in table  # (75 - 15) / 120
    assert "| pwm-oblivious | 0% |" in table  # (15 - 15) / 120: random play
    assert "| dez-oblivious |  |" in table and table.count(plot.KEPT_DEFINITION) == 1  # no delay-0 run


@pytest.mark.parametrize(
    "agent_delayed, agent_undelayed, random_delayed, random_undelayed, expected",
    [
        (300.0, 500.0, 20.0, 20.0, (300 - 20) / (500 - 20)),  # positive returns
        (-442.4, -169.6, -1271.0, -1271.0, (-442.4 + 1271) / (-169.6 + 1271)),  # Pendulum's negative ones: 75%
        (-1271.0, -169.6, -1271.0, -1271.0, 0.0),  # random play is 0%
        (-169.6, -169.6, -1271.0, -1200.0, (-169.6 + 1271) / (-169.6 + 1200)),  # random play's own delay counts
        (0.5, 0.45, 0.4, 0.45, None),  # an undelayed agent at random play's level keeps nothing measurable
        (0.3, 0.4, 0.4, 0.45, None),  # nor one below it
        (9.3, 9.3, 0.4, 0.4, 1.0),
    ],
    ids=["positive", "negative", "random-level", "random-per-delay", "base-at-random", "base-below", "all"],
)
def test_kept_is_the_share_of_the_undelayed_margin_over_random_play(
    agent_delayed, agent_undelayed, random_delayed, random_undelayed, expected
):
    share = plot.kept(agent_delayed, agent_undelayed, random_delayed, random_undelayed)
    assert share == pytest.approx(expected) if expected is not None else share is None


def test_a_grid_with_negative_returns_prints_kept_in_a_sensible_range(tmp_path):
    """Pendulum-like returns (negative; random play about -1271): the old ratio printed 261% and 600%."""
    logs = tmp_path / "logs"
    for seed in (0, 1):
        fake_cell(logs, Cell("pwm", "Pendulum-v1", 0, "random-walk", False, seed, "pwm"), [[-170.0]] * 3)
        fake_cell(logs, Cell("pwm", "Pendulum-v1", 5, "random-walk", True, seed, "pwm-forecast"), [[-442.0]] * 3)
        fake_cell(logs, Cell("pwm", "Pendulum-v1", 5, "random-walk", False, seed, "pwm-oblivious"), [[-1017.0]] * 3)
    random = {"Pendulum-v1": {0: [-1271.0], 5: [-1271.0]}}
    table = plot.delay_table(find_runs(logs), n_resamples=100, random=random)
    rows = [line.split(" | ") for line in table.splitlines() if line.endswith("% |")]
    shares = {cells[0][2:]: cells[1][:-2] for cells in rows}
    assert shares == {"pwm-forecast": "75%", "pwm-oblivious": "23%"}, table


def test_final_return_is_the_mean_of_the_last_evaluations_in_step_order(tmp_path):
    logs = tmp_path / "logs"
    fake_cell(logs, _variant("ppo+view", "ppo", 2, 0, True), [[40.0], [10.0], [20.0], [30.0]], [400, 100, 200, 300])
    (run,) = find_runs(logs)
    assert plot.final_return(run, last=1) == 40.0
    assert plot.final_return(run, last=3) == 30.0  # steps 200, 300, 400
    assert plot.final_return(run, last=10) == 25.0


def test_the_same_runs_redraw_the_same_table_byte_for_byte_and_the_same_figure_pixel_for_pixel(tmp_path, capsys):
    logs = tmp_path / "logs"
    _study(logs)
    outputs = [tmp_path / "a", tmp_path / "b"]
    for output in outputs:
        assert plot.main(["-f", str(logs), "--by-delay", "-o", str(output)]) == 0
    capsys.readouterr()
    assert (outputs[0] / "by-delay.md").read_bytes() == (outputs[1] / "by-delay.md").read_bytes()
    first, second = (image.imread(output / "CartPole-v1-by-delay.png") for output in outputs)
    assert first.shape == second.shape and np.array_equal(first, second)
    assert plot.main(["-f", str(logs), "--by-delay", "--last", "0"]) == 2


def _budget_study(logs: Path) -> None:
    """Seeds 0 and 1 of two agents evaluated every 100 steps; seed 1 of pwm-forecast resumed at 150, so
    that it has no evaluation at 200 steps."""
    for seed in (0, 1):
        fake_cell(logs, _variant("pwm", "pwm", 0, seed, False), [[10.0], [20.0 + seed], [30.0]])
        fake_cell(logs, _variant("ppo+view", "ppo", 5, seed, True), [[1.0], [2.0 + seed], [100.0]])
    fake_cell(logs, _variant("pwm-forecast", "pwm", 5, 0, True), [[5.0], [8.0], [9.0]])
    fake_cell(logs, _variant("pwm-forecast", "pwm", 5, 1, True), [[7.0], [8.0]], steps=[150, 250])


def test_at_steps_takes_each_runs_evaluation_at_the_budget_and_names_a_cell_without_one(tmp_path, capsys):
    logs, output = tmp_path / "logs", tmp_path / "plots"
    _budget_study(logs)
    assert plot.main(["-f", str(logs), "--by-delay", "-o", str(output), "--at-steps", "CartPole-v1=200"]) == 0
    err = capsys.readouterr().err
    assert f"warning: {logs / 'pwm-forecast_CartPole-v1_random-walk5+view_seed1'} has no evaluation at 200" in err
    table = (output / "at-steps.md").read_text()
    assert table.startswith("### CartPole-v1 at 200 env steps\n")
    assert "| ppo+view |  | 2.5 [2.0, 3.0] (2) |" in table  # the evaluation at 200, not the final 100
    assert "| pwm-forecast | 20.5 [20.0, 21.0] (2) | 8.0 [8.0, 8.0] (1) |" in table
    assert "at 200 env steps (not in the table): pwm-forecast_CartPole-v1_random-walk5+view_seed1." in table
    assert "| ppo+view |  | 34.5 [34.3, 34.7] (2) |" in (output / "by-delay.md").read_text()  # last 3
    expected = {"CartPole-v1-by-delay.png", "CartPole-v1-curves.png", "CartPole-v1-at-200-steps.png"}
    assert expected | {"by-delay.md", "at-steps.md"} == {path.name for path in output.iterdir()}


def test_a_grid_file_gives_the_plot_its_budgets_and_each_envs_seeds(tmp_path, capsys):
    logs, output = tmp_path / "logs", tmp_path / "plots"
    _budget_study(logs)
    grid = tmp_path / "grid.yml"
    grid.write_text(
        "seeds: [0, 1]\ndelay_process: random-walk\nenvs:\n  CartPole-v1: {delays: [0, 5], seeds: [0], budget: 300}\n"
        "variants:\n  ppo+view: {algo: ppo, pending_view: true}\n  pwm-forecast: {algo: pwm, pending_view: true}\n"
    )
    assert plot.main(["-f", str(logs), "--by-delay", "-o", str(output), "--grid", str(grid)]) == 0
    assert "warning" not in capsys.readouterr().err
    table = (output / "at-steps.md").read_text()
    assert "| ppo+view |  | 100.0 [100.0, 100.0] (1) |" in table  # seed 0 only; no ppo delay-0 cell in the grid
    assert "| pwm-forecast | 30.0 [30.0, 30.0] (1) | 9.0 [9.0, 9.0] (1) |" in table


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("CartPole-v1", "--at-steps 'CartPole-v1': expected ENV=N"),
        ("=200", "--at-steps '=200': expected ENV=N"),
        ("CartPole-v1=2e4", "--at-steps 'CartPole-v1=2e4': '2e4' is not an integer number of env steps"),
        ("CartPole-v1=-200", "--at-steps 'CartPole-v1=-200': the env steps must be >= 1, got -200"),
        ("Pendulum-v1=200", "--at-steps Pendulum-v1: no runs of that env"),
    ],
)
def test_a_bad_at_steps_value_exits_2_naming_it(tmp_path, capsys, value, message):
    logs = tmp_path / "logs"
    _budget_study(logs)
    assert plot.main(["-f", str(logs), "--by-delay", "-o", str(tmp_path / "plots"), "--at-steps", value]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "plots").exists()


def test_curves_line_up_runs_by_step_value_with_a_band_only_where_two_runs_have_data():
    resumed = (np.array([150.0, 250.0]), np.array([7.0, 9.0]))
    steps, mean, low, high = plot._mean_band([(np.array([100.0, 200.0, 300.0]), np.array([1.0, 2.0, 3.0])), resumed])
    assert steps.tolist() == [100, 150, 200, 250, 300]
    assert mean.tolist() == [1.0, 4.25, 5.0, 5.75, 3.0]  # 150: (1.5 + 7) / 2, 200: (2 + 8) / 2
    assert np.isnan(low[[0, 4]]).all() and low[1:4].tolist() == [1.5, 2.0, 2.5] and high[1:4].tolist() == [7, 8, 9]


def test_random_play_is_read_from_the_log_folder_and_drawn_as_a_row_of_the_tables(tmp_path, capsys):
    logs, output = tmp_path / "logs", tmp_path / "plots"
    _budget_study(logs)
    (logs / RANDOM_PLAY).write_text("env,delay,episode_0,episode_1\nCartPole-v1,0,20,24\nCartPole-v1,5,10,11\n")
    assert read_random_play(logs) == {"CartPole-v1": {0: [20.0, 24.0], 5: [10.0, 11.0]}}
    assert plot.main(["-f", str(logs), "--by-delay", "-o", str(output), "--at-steps", "CartPole-v1=200"]) == 0
    capsys.readouterr()
    for table in ("by-delay.md", "at-steps.md"):
        assert "| random play | 22.0 | 10.5 |" in (output / table).read_text()
    (logs / RANDOM_PLAY).write_text("env,delay\nCartPole-v1,five\n")
    assert plot.main(["-f", str(logs), "--by-delay", "-o", str(output)]) == 2
    assert "a row must be env,delay,returns" in capsys.readouterr().err


def test_random_play_of_an_observation_delay_run_is_keyed_by_its_observation_delay(tmp_path):
    from delayzoo.zoo.random_play import run_delay

    logs = tmp_path / "logs"
    for label, kind in (("ppo", "observation"), ("dqn", "execution")):
        cell = Cell(label, "CartPole-v1", 5, "random-walk", False, 0, label, delay_kind=kind)
        fake_cell(logs, cell, [[10.0, 12.0]])
    args = next(logs.glob("ppo_*/ppo/*/*/args.yml"))
    args.write_text("algo: ppo\nenv: CartPole-v1\nseed: 0\ndelay: null\nobs_delay: 4\nobs_delay_process: constant\n")
    delays = {run.algo: run_delay(run) for run in find_runs(logs)}
    assert delays == {"ppo": 4, "dqn": 5}
