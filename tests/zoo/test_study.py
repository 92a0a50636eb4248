"""The delay benchmark's command: bad input refused before anything is written, and --quick end to end."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import pytest

from delayzoo.zoo import study
from delayzoo.zoo.grid import load_grid
from delayzoo.zoo.random_play import read_random_play
from delayzoo.zoo.runs import find_runs
from tests.zoo.helpers import files_under

GOOD = """
seeds: [0]
delay_process: random-walk
envs:
  CartPole-v1:
    delays: [0, 2]
    train_args: {ppo: [-n, "500", --save-freq, "100"]}
variants:
  ppo: {algo: ppo}
"""


@pytest.mark.parametrize(
    ("change", "extra", "message"),
    [
        (("CartPole-v1:", "CartPole-v9:"), [], "unknown env 'CartPole-v9'"),
        (("ppo: {algo: ppo}", "ppo: {algo: ppo2}"), [], "unknown algorithm 'ppo2'"),
        (("", ""), ["-n", "50"], "-n 50 is below its --save-freq 100: only the final model would be evaluated"),
        (("", ""), ["-n", "0"], "-n 0 leaves no step to train"),
        (("seeds: [0]", "seeds: 0"), [], "seeds must be a non-empty list of distinct integers >= 0"),
        (("seeds: [0]", "seeds: [0, 1, 0]"), [], "got [0, 1, 0] (0 twice)"),
        (("delays: [0, 2]", "delays: [0, 2, 2]"), [], "delays must be a non-empty list of distinct integers >= 0"),
        (("seeds: [0]", "seeds: [-1]"), [], "seeds must be a non-empty list of distinct integers >= 0, got [-1]"),
    ],
)
def test_bad_input_exits_2_with_one_line_before_anything_is_written(tmp_path, capsys, change, extra, message):
    grid = tmp_path / "grid.yml"
    grid.write_text(GOOD.replace(*change))
    logs = tmp_path / "logs"
    assert study.main(["--grid", str(grid), "-f", str(logs), *extra]) == 2
    error = capsys.readouterr().err
    assert message in error and error.count("\n") == 1
    assert files_under(logs) == []


def test_minatar_without_its_extra_exits_2_naming_it(tmp_path, capsys, monkeypatch):
    registry = {name: spec for name, spec in gym.registry.items() if not name.startswith("MinAtar/")}
    monkeypatch.setattr(gym.envs.registration, "registry", registry)
    monkeypatch.setattr(gym, "registry", registry)
    monkeypatch.setitem(sys.modules, "minatar.gym", None)
    grid = tmp_path / "grid.yml"
    grid.write_text(GOOD.replace("CartPole-v1:", "MinAtar/Breakout-v1:"))
    assert study.main(["--grid", str(grid), "-f", str(tmp_path / "logs")]) == 2
    assert 'pip install "delayzoo[minatar]"' in capsys.readouterr().err
    assert files_under(tmp_path / "logs") == []


def test_a_dry_run_prints_the_projection_and_the_cells_of_the_benchmark(tmp_path, capsys):
    assert study.main(["-f", str(tmp_path / "logs"), "--dry-run"]) == 0
    output = capsys.readouterr().out
    # CartPole-v1: 5 seeds x (3 delay-0 cells + 7 variants x 3 delays); MinAtar: 3 seeds x (3 + 6 x 2);
    # Pendulum-v1: 3 x (2 + 4 x 2); the swing-up: 3 x (2 + 4 x 1)
    assert "CPU time projected for the 213 cell(s) left" in output and "213 cell(s); 213 to run:" in output
    assert "sac+view_Pendulum-v1_random-walk10+view_seed2: new" in output
    assert "pwm-forecast_dm_control-cartpole-swingup-v0_random-walk5+view_seed0: new" in output
    assert "ppo_Pendulum-v1_random-walk5_seed0" not in output and "sac_CartPole-v1" not in output
    assert "pwm-augmented_CartPole-v1_random-walk10+view_seed4: new" in output
    assert "dez-forward_MinAtar-Breakout-v1_random-walk5+view_seed3: new" not in output
    assert "dez-oblivious_MinAtar-Breakout-v1_random-walk5+view_seed0: new" in output
    assert files_under(tmp_path / "logs") == []


def test_envs_and_agents_select_cells_of_the_grid_with_their_algorithms_delay_0_cells(tmp_path, capsys):
    logs = tmp_path / "logs"
    assert study.main(["-f", str(logs), "--dry-run", "--envs", "CartPole-v1", "--agents", "ppo+view"]) == 0
    cells = [line.split(":")[0].strip() for line in capsys.readouterr().out.splitlines() if line.endswith(": new")]
    assert sorted(cells) == sorted(
        [f"ppo_CartPole-v1_random-walk0_seed{seed}" for seed in range(5)]
        + [f"ppo+view_CartPole-v1_random-walk{delay}+view_seed{seed}" for delay in (2, 5, 10) for seed in range(5)]
    )
    assert study.main(["-f", str(logs), "--agents", "ppo+vision"]) == 2
    assert "--agents ppo+vision: not in" in capsys.readouterr().err
    assert study.main(["-f", str(logs), "--envs", "Pong-v5"]) == 2
    assert "--envs Pong-v5: not in" in capsys.readouterr().err
    assert files_under(logs) == []


def test_delays_and_seeds_select_a_slice_of_the_grid(tmp_path, capsys):
    logs = tmp_path / "logs"
    argv = ["-f", str(logs), "--dry-run", "--envs", "CartPole-v1", "--agents", "pwm-forecast"]
    assert study.main([*argv, "--delays", "0", "10", "--seeds", "2"]) == 0
    cells = [line.split(":")[0].strip() for line in capsys.readouterr().out.splitlines() if line.endswith(": new")]
    assert cells == ["pwm_CartPole-v1_random-walk0_seed2", "pwm-forecast_CartPole-v1_random-walk10+view_seed2"]
    assert study.main([*argv, "--delays", "10"]) == 0  # no delay 0: the algorithm's delay-0 cells stay out
    cells = [line.split(":")[0].strip() for line in capsys.readouterr().out.splitlines() if line.endswith(": new")]
    assert cells == [f"pwm-forecast_CartPole-v1_random-walk10+view_seed{seed}" for seed in range(5)]
    assert study.main([*argv, "--delays", "0"]) == 0  # delay 0 alone: the algorithm's delay-0 cells
    cells = [line.split(":")[0].strip() for line in capsys.readouterr().out.splitlines() if line.endswith(": new")]
    assert cells == [f"pwm_CartPole-v1_random-walk0_seed{seed}" for seed in range(5)]
    assert study.main([*argv, "--delays", "3"]) == 2
    error = capsys.readouterr().err
    assert "--delays 3: not in" in error and "(it has 0, 2, 5, 10)" in error
    assert study.main([*argv, "--seeds", "7"]) == 2
    assert "--seeds 7: not in" in capsys.readouterr().err
    assert files_under(logs) == []


@pytest.mark.slow
def test_quick_study_runs_end_to_end_and_writes_the_figure_and_the_table(tmp_path: Path, capsys):
    """Nine cells on local Ray (several minutes on 2 cores)."""
    logs = tmp_path / "logs"
    assert study.main(["--quick", "-f", str(logs)]) == 0
    output = capsys.readouterr().out
    assert output.count("done     ") == 9
    assert (logs / "plots" / "CartPole-v1-by-delay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (logs / "plots" / "by-delay.md").read_text()
    for agent in ("ppo", "ppo+view", "dez-forward", "dez-oblivious", "pwm-forecast", "pwm-oblivious"):
        assert f"| {agent} | " in table
    assert "| agent | kept at 5 |" in table
    assert len(find_runs(logs)) == 9
    assert study.main(["--quick", "-f", str(logs)]) == 0  # relaunched: every cell is done
    assert "Nothing to run: the 9 cell(s) are trained and evaluated." in capsys.readouterr().out


def test_after_the_sweep_the_study_plays_at_random_and_plots_at_the_grids_budget(tmp_path, capsys, monkeypatch):
    from tests.zoo.test_plot import fake_cell

    grid = tmp_path / "grid.yml"
    grid.write_text(GOOD.replace("    delays: [0, 2]\n", "    delays: [0, 2]\n    budget: 200\n"))
    logs = tmp_path / "logs"
    for cell in load_grid(grid).cells():
        fake_cell(logs, cell, [[10.0, 12.0], [20.0, 22.0], [30.0, 32.0]])
    monkeypatch.setattr(study.sweep, "main", lambda argv, prog: 0)
    assert study.main(["--grid", str(grid), "-f", str(logs), "--eval-n-episodes", "3"]) == 0
    assert set(read_random_play(logs)) == {"CartPole-v1"} and len(read_random_play(logs)["CartPole-v1"][2]) == 3
    assert "| ppo | 21.0 [21.0, 21.0] (1) | 21.0 [21.0, 21.0] (1) |" in (logs / "plots" / "at-steps.md").read_text()
    assert (logs / "plots" / "CartPole-v1-curves.png").is_file()
