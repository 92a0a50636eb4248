"""Grid files: named variants, per-env delays, one delay-0 cell per algorithm, the cells' train commands."""

from __future__ import annotations

from pathlib import Path

import pytest

from delayzoo.zoo import sweep
from delayzoo.zoo.errors import ZooError
from delayzoo.zoo.grid import Cell, load_grid
from delayzoo.zoo.study import GRID, OBS_GRID, QUICK_GRID, resolve_grid

GRID_TEXT = """
seeds: [0, 1]
delay_process: random-walk
delay_args: [--init-action, random]
train_args: [--eval-freq, "-1"]
envs:
  CartPole-v1:
    delays: [0, 3]
    train_args: {pwm: [--preset, benchmark, -params, "learning_starts:100"]}
    eval_args: {pwm: [--n-envs, "4"]}
  Acrobot-v1:
    delays: [0, 5, 10]
variants:
  ppo: {algo: ppo}
  ppo+view: {algo: ppo, pending_view: true}
  pwm-forecast: {algo: pwm, pending_view: true, params: {delay_mode: forecast}, envs: [CartPole-v1]}
  pwm-oblivious: {algo: pwm, params: {delay_mode: oblivious}, envs: [CartPole-v1]}
"""


@pytest.fixture
def grid_file(tmp_path: Path) -> Path:
    path = tmp_path / "grid.yml"
    path.write_text(GRID_TEXT)
    return path


def test_each_algorithm_runs_once_at_delay_0_and_every_variant_at_the_envs_other_delays(grid_file):
    cells = load_grid(grid_file).cells()
    names = [cell.name for cell in cells]
    assert names[:8] == [
        "ppo_CartPole-v1_random-walk0_seed0",
        "pwm_CartPole-v1_random-walk0_seed0",
        "ppo_CartPole-v1_random-walk0_seed1",
        "pwm_CartPole-v1_random-walk0_seed1",
        "ppo_CartPole-v1_random-walk3_seed0",
        "ppo+view_CartPole-v1_random-walk3+view_seed0",
        "pwm-forecast_CartPole-v1_random-walk3+view_seed0",
        "pwm-oblivious_CartPole-v1_random-walk3_seed0",
    ]
    assert len(cells) == 2 * (2 + 4) + 2 * (1 + 2 * 2)  # CartPole: 2 algos at 0, 4 variants at 3; Acrobot: ppo only
    acrobot = {cell.name for cell in cells if cell.env_id == "Acrobot-v1"}
    assert "ppo+view_Acrobot-v1_random-walk10+view_seed1" in acrobot and not any("pwm" in name for name in acrobot)
    forecast = next(cell for cell in cells if cell.label == "pwm-forecast")
    assert forecast.record() == {
        "label": "pwm-forecast",
        "algo": "pwm",
        "env": "CartPole-v1",
        "delay": 3,
        "delay_kind": "execution",
        "process": "random-walk",
        "pending_view": True,
        "delay_aware": True,
        "seed": 0,
        "params": ["delay_mode:'forecast'"],
    }


def test_a_cells_train_command_holds_its_flags_and_one_params_with_the_envs_the_variants_and_the_users(grid_file):
    cells = {cell.name: cell for cell in load_grid(grid_file).cells()}
    logs = Path("/logs")
    name = "pwm-forecast_CartPole-v1_random-walk3+view_seed0"
    forecast = sweep.train_argv(cells[name], logs, ["-params", "gamma:0.9"])
    assert forecast == [
        *("--algo", "pwm", "--env", "CartPole-v1", "--seed", "0", "-f", f"/logs/{name}"),
        *("--delay", "3", "--delay-process", "random-walk", "--init-action", "random", "--pending-view"),
        *("--eval-freq", "-1", "--preset", "benchmark"),
        *("-params", "learning_starts:100", "delay_mode:'forecast'", "gamma:0.9"),
    ]
    undelayed = sweep.train_argv(cells["pwm_CartPole-v1_random-walk0_seed0"], logs, [])
    assert "--delay" not in undelayed and "--init-action" not in undelayed and "--no-pending-view" in undelayed
    assert undelayed[-2:] == ["-params", "learning_starts:100"]
    oblivious = sweep.train_argv(cells["pwm-oblivious_CartPole-v1_random-walk3_seed0"], logs, [])
    assert "--no-pending-view" in oblivious and oblivious[-1] == "delay_mode:'oblivious'"
    plain = Cell("ppo", "CartPole-v1", 2, "constant", False, 0)
    assert sweep.train_argv(plain, logs, ["-n", "10"]) == [
        *("--algo", "ppo", "--env", "CartPole-v1", "--seed", "0", "-f", "/logs/ppo_CartPole-v1_delay2_seed0"),
        *("--delay", "2", "--delay-process", "constant", "-n", "10"),
    ]


def test_an_algorithms_eval_flags_on_an_env_come_last_in_its_cells_eval_command(grid_file):
    cells = {cell.name: cell for cell in load_grid(grid_file).cells()}
    plan = ("train", "train new", [])
    sweep_eval = ["-n", "16", "--n-envs", "1"]
    for name in ("pwm_CartPole-v1_random-walk0_seed1", "pwm-forecast_CartPole-v1_random-walk3+view_seed0"):
        task = sweep.make_task(cells[name], Path("/logs"), [], plan, sweep_eval, 1, 0, 60)
        evaluate = dict(task.commands)["eval"]
        assert evaluate[-6:] == [*sweep_eval, "--n-envs", "4"]
    ppo = sweep.make_task(cells["ppo_Acrobot-v1_random-walk5_seed0"], Path("/logs"), [], plan, sweep_eval, 1, 0, 60)
    assert dict(ppo.commands)["eval"][-4:] == sweep_eval


def test_an_env_runs_its_own_seeds_and_records_its_budget(tmp_path):
    path = tmp_path / "grid.yml"
    own = "    delays: [0, 3]\n    seeds: [3, 4, 5]\n    budget: 200\n"
    path.write_text(GRID_TEXT.replace("    delays: [0, 3]\n", own))
    grid = load_grid(path)
    seeds = {env: {cell.seed for cell in grid.cells() if cell.env_id == env} for env in grid.envs}
    assert seeds == {"CartPole-v1": {3, 4, 5}, "Acrobot-v1": {0, 1}}
    assert grid.budgets == {"CartPole-v1": 200}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("envs: {CartPole-v1: {delays: [0]}}\nvariants: {p: {algo: ppo}}\nextra: 1\n", "unknown entries \\['extra'\\]"),
        ("envs: {CartPole-v1: {delays: []}}\nvariants: {ppo: {algo: ppo}}\n", "envs.CartPole-v1.delays must be"),
        ("envs: {CartPole-v1: {delays: [-1]}}\nvariants: {ppo: {algo: ppo}}\n", "integers >= 0, got \\[-1\\]"),
        ("envs: {CartPole-v1: {delays: [0]}}\nvariants: {ppo: {params: {a: 1}}}\n", "variants.ppo must be a mapping"),
        ("envs: {CartPole-v1: {delays: [0]}}\nvariants: {a_b: {algo: ppo}}\n", "may not be empty or hold"),
        ("envs: {CartPole-v1: {delays: [0]}}\nvariants: {p: {algo: ppo, envs: [Pong]}}\n", "some of the grid's envs"),
        ("envs: {CartPole-v1: {delays: [0]}}\nvariants: {p: {algo: ppo}}\ndelay_process: x\n", "delay_process must"),
        ("envs: {CartPole-v1: {delays: [0]}}\nvariants: {p: {algo: ppo}}\nseeds: [a]\n", "seeds must be"),
        ("envs: {CartPole-v1: {delays: [0], eval_args: [-n]}}\nvariants: {p: {algo: ppo}}\n", "eval_args must map"),
        ("envs: {CartPole-v1: {delays: [0], eval_args: {ppo: 8}}}\nvariants: {p: {algo: ppo}}\n", "eval_args.ppo must"),
        ("envs: {CartPole-v1: {delays: [0], seeds: []}}\nvariants: {p: {algo: ppo}}\n", "CartPole-v1.seeds must be"),
        ("envs: {CartPole-v1: {delays: [0], budget: 0}}\nvariants: {p: {algo: ppo}}\n", "budget must be a number"),
        ("envs: {CartPole-v1: {delays: [0], budget: 2e4}}\nvariants: {p: {algo: ppo}}\n", "budget must be a number"),
        ("- a list\n", "must hold a mapping"),
        ("envs: {CartPole-v1: {delays: [0]}}\nvariants: !!python/object:os.system {}\n", "not plain YAML data"),
    ],
)
def test_a_bad_grid_file_is_refused_naming_the_entry(tmp_path, text, message):
    path = tmp_path / "grid.yml"
    path.write_text(text)
    with pytest.raises(ZooError, match=message):
        load_grid(path)
    with pytest.raises(ZooError, match="cannot read the grid file"):
        load_grid(tmp_path / "missing.yml")


CONTINUOUS = ("Pendulum-v1", "dm_control/cartpole-swingup-v0")


def test_the_studys_grids_are_the_benchmark_the_issue_describes():
    cells = load_grid(GRID).cells()
    by_env = {env: [cell for cell in cells if cell.env_id == env] for env in ("CartPole-v1", "MinAtar/Breakout-v1")}
    assert sorted({cell.delay for cell in by_env["CartPole-v1"]}) == [0, 2, 5, 10]
    assert sorted({cell.delay for cell in by_env["MinAtar/Breakout-v1"]}) == [0, 5, 10]
    assert {cell.seed for cell in by_env["CartPole-v1"]} == {0, 1, 2, 3, 4}
    assert {cell.seed for cell in by_env["MinAtar/Breakout-v1"]} == {0, 1, 2}
    assert {cell.process for cell in cells} == {"random-walk"}
    cartpole_agents = {cell.agent for cell in by_env["CartPole-v1"] if cell.delay > 0}
    pairs = {"ppo", "ppo+view", "dez-forward", "dez-oblivious", "pwm-forecast", "pwm-oblivious"}
    assert cartpole_agents == pairs | {"pwm-augmented"}
    assert {cell.agent for cell in by_env["MinAtar/Breakout-v1"] if cell.delay > 0} == pairs
    discrete = [cell for cell in cells if cell.env_id in by_env]
    assert {cell.agent for cell in discrete if cell.delay == 0} == {"ppo", "delayed_ez", "pwm"}
    assert all("--init-action" in cell.delay_args for cell in cells if cell.delay > 0)
    continuous = {env: [cell for cell in cells if cell.env_id == env] for env in CONTINUOUS}
    assert sorted({cell.delay for cell in continuous["Pendulum-v1"]}) == [0, 5, 10]
    assert sorted({cell.delay for cell in continuous["dm_control/cartpole-swingup-v0"]}) == [0, 5]
    for env, env_cells in continuous.items():
        assert {cell.seed for cell in env_cells} == {0, 1, 2}, env
        delayed = {cell.agent for cell in env_cells if cell.delay > 0}
        assert delayed == {"sac", "sac+view", "pwm-forecast", "pwm-oblivious"}, env
        assert {cell.agent for cell in env_cells if cell.delay == 0} == {"sac", "pwm"}
    swingup_pwm = [cell.args for cell in continuous["dm_control/cartpole-swingup-v0"] if cell.algo == "pwm"]
    assert all(args[args.index("--preset") + 1] == "benchmark" for args in swingup_pwm)  # the CPU-sized model
    assert len(cells) == 5 * (3 + 3 * 7) + 3 * (3 + 2 * 6) + 3 * (2 + 2 * 4) + 3 * (2 + 1 * 4)
    assert load_grid(GRID).budgets == {
        "CartPole-v1": 20000,
        "MinAtar/Breakout-v1": 50000,
        "Pendulum-v1": 20000,
        "dm_control/cartpole-swingup-v0": 50000,
    }
    quick = load_grid(QUICK_GRID).cells()
    assert {(cell.env_id, cell.delay, cell.seed) for cell in quick} == {("CartPole-v1", 0, 0), ("CartPole-v1", 5, 0)}
    assert len(quick) == 3 + 6


def test_the_observation_delay_grid_is_the_study_the_issue_describes(tmp_path, monkeypatch):
    cells = load_grid(OBS_GRID).cells()
    kinds = {(cell.env_id, cell.delay_kind, cell.process) for cell in cells}
    assert kinds == {("CartPole-v1", "observation", "random-walk")}
    assert sorted({cell.delay for cell in cells}) == [5, 10] and {cell.seed for cell in cells} == {0, 1, 2}
    agents = {(cell.agent, cell.pending_view) for cell in cells}
    assert agents == {("ppo", False), ("ppo+view", True), ("pwm-forecast", True), ("pwm-oblivious", False)}
    assert len(cells) == 4 * 2 * 3
    assert load_grid(OBS_GRID).budgets == {"CartPole-v1": 20000}
    train = [cell.train_args(tmp_path) for cell in cells if cell.agent == "pwm-forecast"][0]
    assert "--obs-delay" in train and "--delay" not in train and "--pending-view" in train
    monkeypatch.chdir(tmp_path)  # the shipped grid by its name, where no file has that name
    assert resolve_grid(Path(OBS_GRID.name)) == OBS_GRID
    (tmp_path / OBS_GRID.name).write_text("seeds: [0]\n")
    assert resolve_grid(Path(OBS_GRID.name)) == Path(OBS_GRID.name), "a file of that name wins"
