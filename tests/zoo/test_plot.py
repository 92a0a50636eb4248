"""plot --by-delay on a grid file's cells: variant lines, the shared delay-0 run, the kept fraction, the last
evaluations, and figures and tables that the same runs redraw exactly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml
from matplotlib import image

from delayzoo.zoo import plot
from delayzoo.zoo.grid import CELL_RECORD, Cell
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
    assert "| agent | kept at 5 |" in table
    assert "| pwm-forecast | 50% |" in table and "| pwm-oblivious | 10% |" in table and "| dez-oblivious |  |" in table
    assert "last 3 evaluated models" in table


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
