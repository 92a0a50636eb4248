"""The sweep command line on local Ray: grids of real train + eval runs (tiny budgets), skips and resumes."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import yaml

from delayzoo.agents.delayed_ez import DelayedEZ
from delayzoo.agents.pwm import PWM
from delayzoo.zoo import cli, plot, sweep
from delayzoo.zoo.runs import find_runs, read_run_yaml
from tests.zoo.helpers import REPO, TINY_PPO, cli_env, files_under, run_module, saved_steps

ray = pytest.importorskip("ray")

BUDGET = ["-n", "2000", "--save-freq", "1000", *TINY_PPO]
"""PPO at 2k steps (2048 with 64-step rollouts), a checkpoint every 1000 steps."""


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray (2 CPUs) for the module: the sweeps join it instead of starting their own."""
    if ray.is_initialized():
        yield
        return
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        logging_level="ERROR",
        runtime_env={"env_vars": {"PYTHONPATH": path}},
    )
    yield
    ray.shutdown()


def _sweep(*args: str) -> int:
    return sweep.main(["--eval-n-episodes", "2", "--eval-checkpoints", "last", *args])


def _final_row(csv_path: Path) -> list[str]:
    with open(csv_path, newline="") as handle:
        return list(csv.reader(handle))[-1]


@pytest.fixture(scope="module")
def study(ray_session, tmp_path_factory):
    """ppo x CartPole-v1 x delays {0, 2} x seeds {0, 1}: the log folder and the sweep's output."""
    logs = tmp_path_factory.mktemp("study") / "logs"
    grid = ["--algos", "ppo", "--envs", "CartPole-v1", "--delays", "0", "2", "--seeds", "0", "1", "-f", str(logs)]
    return logs, grid


def test_sweep_runs_every_cell_then_relaunch_skips_them_and_plot_draws_return_against_delay(study, capsys):
    logs, grid = study
    assert _sweep(*grid, *BUDGET) == 0
    output = capsys.readouterr().out
    runs = find_runs(logs)
    assert len(runs) == 4 and sorted(path.name for path in logs.iterdir()) == [
        "ppo_CartPole-v1_delay0_seed0",
        "ppo_CartPole-v1_delay0_seed1",
        "ppo_CartPole-v1_delay2_seed0",
        "ppo_CartPole-v1_delay2_seed1",
    ]
    for run in runs:
        seed, delay = run.args["seed"], run.args["delay"]
        assert run.path == logs / f"ppo_CartPole-v1_delay{delay}_seed{seed}" / "ppo" / "CartPole-v1_1"
        assert (run.args["n_timesteps"], run.config["delay"]["delay"]) == (2000, delay)
        assert saved_steps(run.final_model) == 2048
        row = _final_row(run.eval_csv)
        assert row[0] == "2048" and len(row) == 3 and all(1 <= float(score) <= 500 for score in row[1:])
        assert f"done     {run.path.parents[1].name}" in output
    assert "done 4, running 0, failed 0, left 0" in output

    stamps = {run.name: run.eval_csv.stat().st_mtime for run in runs}
    assert cli.main(["sweep", *grid, *BUDGET, "--eval-n-episodes", "2"]) == 0
    output = capsys.readouterr().out
    assert output.count("skipped  ppo_CartPole-v1_delay") == 4 and "Nothing to run" in output
    assert {run.name: run.eval_csv.stat().st_mtime for run in find_runs(logs)} == stamps

    assert plot.main(["-f", str(logs), "--by-delay"]) == 0
    plots = logs / "plots"
    assert (plots / "CartPole-v1-by-delay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (plots / "by-delay.md").read_text()
    assert "| agent | delay 0 | delay 2 |" in table
    means = {
        delay: sum(
            float(_final_row(run.eval_csv)[1]) + float(_final_row(run.eval_csv)[2])
            for run in runs
            if run.args["delay"] == delay
        )
        / 4
        for delay in (0, 2)
    }
    assert f"| ppo | {means[0]:.1f} [" in table and f"{means[2]:.1f} [" in table and table.count("(2)") == 2


def test_dry_run_prints_the_grid_and_what_each_cell_would_do_without_running(study, capsys):
    logs, grid = study
    assert _sweep(*grid[:-2], "-f", str(logs.parent / "other"), "--delays", "5", "--dry-run", *BUDGET) == 0
    output = capsys.readouterr().out
    assert "2 cell(s); 2 to run" in output and "ppo_CartPole-v1_delay5_seed1: new" in output
    assert "delayzoo.zoo.train --algo ppo --env CartPole-v1 --seed 1" in output
    assert not (logs.parent / "other").exists()


@pytest.mark.slow  # two more runs; test_killed_run_is_reported_... covers the report in the default suite
def test_a_failing_cell_is_reported_with_its_log_and_the_others_finish(ray_session, tmp_path, capsys):
    logs = tmp_path / "logs"
    # DQN takes no n_epochs (TINY_PPO): its train exits 2; PPO's runs.
    code = _sweep("--algos", "dqn", "ppo", "--envs", "CartPole-v1", "--delays", "1", "-f", str(logs), *BUDGET)
    output = capsys.readouterr().out
    assert code == 1
    failed_log = logs / "dqn_CartPole-v1_delay1_seed0" / "sweep.log"
    assert f"FAILED dqn_CartPole-v1_delay1_seed0: train failed (exit code 2); see {failed_log}" in output
    assert "hyperparameter 'n_epochs' is not an argument of DQN" in failed_log.read_text()
    assert [run.algo for run in find_runs(logs)] == ["ppo"]
    assert _final_row(find_runs(logs)[0].eval_csv)[0] == "2048"
    assert "done 1, running 0, failed 1, left 0" in output


def test_an_interrupted_run_is_resumed_from_its_last_checkpoint_with_the_step_counter_continued(
    ray_session, tmp_path, capsys
):
    logs = tmp_path / "logs"
    cell = sweep.Cell("ppo", "CartPole-v1", 1, "constant", False, 0)
    # the cell's train command, stopped at 1024 steps, its final model lost as when a run is killed
    first = run_module(
        "delayzoo.zoo.train",
        *cell.train_args(logs),
        *TINY_PPO,
        "-n",
        "1000",
        "--save-freq",
        "500",
        "--num-threads",
        "1",
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    interrupted = logs / cell.name / "ppo" / "CartPole-v1_1"
    (interrupted / "CartPole-v1.zip").unlink()
    assert _sweep("--algos", "ppo", "--envs", "CartPole-v1", "--delays", "1", "-f", str(logs), *BUDGET) == 0
    output = capsys.readouterr().out
    assert f"done     {cell.name}" in output and ") resume; log" in output
    resumed = logs / cell.name / "ppo" / "CartPole-v1_2"
    assert read_run_yaml(resumed / "CartPole-v1" / "args.yml")["resume_timesteps"] == 1000
    assert saved_steps(resumed / "CartPole-v1.zip") == 2024  # 1000 + 16 rollouts of 64 steps
    assert sorted(saved_steps(path) for path in resumed.glob("rl_model_*_steps.zip")) == [2000]  # --save-freq 1000
    assert _final_row(logs / cell.name / "eval_result" / "ppo" / "CartPole-v1_2.csv")[0] == "2024"


def _fake_sweep_run(logs: Path, cell: sweep.Cell, scores: list[float]) -> None:
    """A cell folder as a sweep leaves it: run folder with args.yml/config.yml, and the eval CSV."""
    env_name = cell.env_id.replace("/", "-")  # the run folder's name, as huggingface_sb3's EnvironmentName
    params = logs / cell.name / cell.algo / f"{env_name}_1" / env_name
    params.mkdir(parents=True)
    (params / "args.yml").write_text(
        f"algo: {cell.algo}\nenv: {cell.env_id}\nseed: {cell.seed}\ndelay: {cell.delay}\n"
        f"delay_process: {cell.process}\npending_view: {str(cell.pending_view).lower()}\n"
    )
    (params / "config.yml").write_text("n_timesteps: 100\n")
    eval_csv = logs / cell.name / "eval_result" / cell.algo / f"{env_name}_1.csv"
    eval_csv.parent.mkdir(parents=True)
    header = ",".join(f"episode_{index}" for index in range(len(scores)))
    eval_csv.write_text(f"step,{header}\n50,{','.join('0' for _ in scores)}\n100,{','.join(map(str, scores))}\n")


def test_by_delay_table_holds_the_mean_over_seeds_of_final_returns_with_bootstrap_intervals(tmp_path, capsys):
    logs = tmp_path / "logs"
    finals = {
        ("ppo", 0, 0): [10, 30],
        ("ppo", 0, 1): [40, 40],
        ("ppo", 3, 0): [5, 5],
        ("ppo", 3, 1): [15, 15],
        ("dqn", 0, 0): [100, 100],
    }
    for (algo, delay, seed), scores in finals.items():
        _fake_sweep_run(logs, sweep.Cell(algo, "CartPole-v1", delay, "constant", False, seed), scores)
    view = sweep.Cell("ppo", "CartPole-v1", 3, "random-walk", True, 0)
    _fake_sweep_run(logs, view, [7, 9])
    out = ["-o", str(tmp_path / "out"), "--n-bootstrap", "500", "--last", "1"]  # the final model's score
    assert plot.main(["-f", str(logs), "--by-delay", *out]) == 0
    table = (tmp_path / "out" / "by-delay.md").read_text()
    assert "| agent | delay 0 | delay 3 |" in table
    assert "| dqn | 100.0 [100.0, 100.0] (1) |  |" in table
    assert "| ppo | 30.0 [20.0, 40.0] (2) | 10.0 [5.0, 15.0] (2) |" in table  # seed means 20, 40 and 5, 15
    assert "| ppo (random-walk from 0, p=0.2) +view |  | 8.0 [8.0, 8.0] (1) |" in table
    assert (tmp_path / "out" / "CartPole-v1-by-delay.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.main(["-f", str(tmp_path / "nothing"), "--by-delay"]) == 2


def test_the_atari_table_reads_a_sweeps_runs(tmp_path):
    logs = tmp_path / "logs"
    for seed, score in enumerate([-20.7, 14.6]):  # random, human
        _fake_sweep_run(logs, sweep.Cell("pwm", "ALE/Pong-v5", 0, "constant", False, seed), [score])
    assert plot.main(["-f", str(logs), "--source", "eval", "--n-bootstrap", "100"]) == 0
    table = (logs / "plots" / "atari100k.md").read_text()
    assert "| pwm (delay=0) | 1/26 | 2 | 0.500 [" in table and "| Pong | -20.7 | 14.6 | -3.0 |" in table


def _fake_model(path: Path, steps: int) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("data", json.dumps({"num_timesteps": steps}))


def test_plan_of_a_cell_skips_evaluates_or_resumes_from_the_latest_readable_model(tmp_path):
    logs = tmp_path / "logs"
    cell = sweep.Cell("ppo", "CartPole-v1", 2, "constant", False, 0)
    assert sweep.plan_cell(cell, logs, 2000, 2)[0] == "train"
    _fake_sweep_run(logs, cell, [1, 2])  # an eval CSV whose last row is step 100
    run = logs / cell.name / "ppo" / "CartPole-v1_1"
    assert sweep.plan_cell(cell, logs, 2000, 2)[:2] == ("train", "new (CartPole-v1_1 saved no model)")
    _fake_model(run / "rl_model_1000_steps.zip", 1000)
    (run / "CartPole-v1.zip").write_bytes(b"cut short by a kill")
    action, _, flags = sweep.plan_cell(cell, logs, 2000, 2)
    assert (action, flags) == ("resume", ["-i", str(run / "rl_model_1000_steps.zip"), "-n", "1000"])
    _fake_model(run / "CartPole-v1.zip", 1200)  # saved at Ctrl-C
    assert sweep.plan_cell(cell, logs, 2000, 2)[2] == ["-i", str(run / "CartPole-v1.zip"), "-n", "800"]
    _fake_model(run / "rl_model_2000_steps.zip", 2000)
    _fake_model(run / "CartPole-v1.zip", 2000)  # trained; the CSV has no row for step 2000
    assert sweep.plan_cell(cell, logs, 2000, 2)[0] == "eval"
    eval_csv = logs / cell.name / "eval_result" / "ppo" / "CartPole-v1_1.csv"
    eval_csv.write_text("step,episode_0,episode_1\n1000,3,4\n2000,5,6\n")
    assert sweep.plan_cell(cell, logs, 2000, 2)[0] == "skip"
    assert sweep.plan_cell(cell, logs, 2000, 3)[0] == "eval"  # fewer episodes than asked
    assert sweep.plan_cell(cell, logs, 3000, 2)[2] == ["-i", str(run / "CartPole-v1.zip"), "-n", "1000"]


@pytest.mark.parametrize("algo", ["pwm", "delayed_ez"])
def test_an_interrupted_run_of_our_agents_is_resumed_from_its_plain_format_model(tmp_path, algo):
    """Our agents save their step counter under ``counters``, not where SB3 puts it: the plan reads both."""
    logs = tmp_path / "logs"
    cell = sweep.Cell(algo, "CartPole-v1", 2, "constant", False, 0)
    _fake_sweep_run(logs, cell, [1, 2])
    run = logs / cell.name / algo / "CartPole-v1_1"
    small = {
        "pwm": dict(
            policy_kwargs=dict(
                world_model_kwargs=dict(stoch=4, classes=4, mlp_units=16, seq_width=16, seq_cells=1, seq_divisor=2),
                actor_critic_kwargs=dict(units=16),
            )
        ),
        "delayed_ez": dict(num_simulations=2),
    }[algo]
    model = {"pwm": PWM, "delayed_ez": DelayedEZ}[algo]("MlpPolicy", "CartPole-v1", device="cpu", **small)
    model.num_timesteps = 700  # as a Ctrl-C at step 700 leaves it
    model.save(run / "CartPole-v1.zip")
    assert saved_steps(run / "CartPole-v1.zip") == 700
    action, _, flags = sweep.plan_cell(cell, logs, 2000, 2)
    assert (action, flags) == ("resume", ["-i", str(run / "CartPole-v1.zip"), "-n", "1300"])


def test_a_cell_evaluated_to_its_budget_counts_as_done_without_its_models(tmp_path):
    """Committed results (eval CSV, args.yml, config.yml; no model) are not trained again on a new machine."""
    logs = tmp_path / "logs"
    cell = sweep.Cell("ppo", "CartPole-v1", 2, "constant", False, 0)
    _fake_sweep_run(logs, cell, [1, 2])  # evaluated at steps 50 and 100, no model file
    plan = sweep.plan_cell(cell, logs, 100, 2)
    assert plan[:2] == ("skip", "done (CartPole-v1_1, evaluated at 100 steps; no model kept)")
    assert sweep.plan_cell(cell, logs, None, 2)[0] == "skip"  # the budget config.yml recorded (n_timesteps: 100)
    assert sweep.plan_cell(cell, logs, 200, 2)[0] == "train"  # evaluated short of the budget
    assert sweep.plan_cell(cell, logs, 100, 3)[0] == "train"  # fewer episodes than asked


def test_a_cells_record_adds_up_the_cpu_time_of_its_launches_and_projects_the_cells_left(tmp_path):
    logs = tmp_path / "logs"
    done, left = (sweep.Cell("ppo", "CartPole-v1", delay, "constant", False, 0, "ppo") for delay in (1, 2))
    burn = [sys.executable, "-c", "import time; end = time.process_time() + 0.5\nwhile time.process_time() < end: pass"]
    for action in ("train", "resume", "train", "resume"):  # a new run forgets what the lost one spent
        task = sweep.CellTask(done, logs / done.name, action, [("train", burn), ("eval", ["true"])], {})
        assert sweep.run_cell(task).status == "done"
    record = yaml.safe_load((logs / done.name / "cell.yml").read_text())
    assert record["label"] == "ppo" and record["delay"] == 1 and record["seed"] == 0
    assert 1.0 <= record["cpu_seconds"]["train"] < 1.5 and record["cpu_seconds"]["eval"] < 0.5
    plans = [("skip", "done", []), ("train", "new", [])]
    line = sweep.project_cpu([done, left], plans, logs)
    assert line.startswith("CPU time projected for the 1 cell(s) left: 0.0 CPU-hours") and "unknown" not in line
    other = sweep.Cell("dqn", "CartPole-v1", 2, "constant", False, 0)
    line = sweep.project_cpu([done, other], plans, logs)
    assert "plus 1 cell(s) of unknown cost (nothing finished yet for dqn on CartPole-v1)" in line
    (logs / done.name / "eval_result" / "ppo").mkdir(parents=True)
    (logs / done.name / "eval_result" / "ppo" / "CartPole-v1_1.csv").write_text("step,episode_0\n100,9\n")
    line = sweep.project_cpu([left], [("train", "new", [])], logs)  # the finished cell left out of the selection
    assert line.startswith("CPU time projected for the 1 cell(s) left: 0.0 CPU-hours") and "unknown" not in line
    (logs / "half-run").mkdir()
    (logs / "half-run" / "cell.yml").write_text(yaml.safe_dump({**other.record(), "cpu_seconds": {"train": 9.0}}))
    line = sweep.project_cpu([other], [("train", "new", [])], logs)  # no evaluation CSV: not a peer
    assert "plus 1 cell(s) of unknown cost (nothing finished yet for dqn on CartPole-v1)" in line


def test_killed_run_is_reported_failed_with_the_signal_and_its_log(tmp_path):
    cell = sweep.Cell("ppo", "CartPole-v1", 0, "constant", False, 0)
    kill = [sys.executable, "-c", "import os, signal; print('started'); os.kill(os.getpid(), signal.SIGKILL)"]
    task = sweep.CellTask(cell, tmp_path / cell.name, "train", [("train", kill), ("eval", ["true"])], {})
    result = sweep.run_cell(task)
    assert (result.status, result.message, result.log) == ("failed", "train failed (killed by signal 9)", task.log)
    assert "started" in task.log.read_text() and not (task.folder / ".running").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--algos", "ppo", "ppo2"], "unknown algorithm 'ppo2'"),
        (["--envs", "CartPole-v9"], "unknown env 'CartPole-v9'"),
        (["--delays", "3", "--min-delay", "4", "--delay-process", "iid"], "--min-delay 4 is above --delay 3"),
        (["--seed", "3"], "--seed is set by the sweep for each cell: use --seeds"),
        (["--cpus-per-run", "0"], "--cpus-per-run must be > 0"),
        (["--address", "nohost"], "--address must be 'auto', HOST:PORT or ray://HOST:PORT"),
        (["--address", "ray://127.0.0.1:9"], "cannot reach the Ray cluster at --address ray://127.0.0.1:9"),
    ],
)
def test_bad_input_exits_2_before_anything_is_written(args, message, tmp_path, capsys):
    base = {"--algos": ["ppo"], "--envs": ["CartPole-v1"], "--delays": ["0"], "-f": [str(tmp_path / "logs")]}
    for flag in args:
        base.pop(flag, None)
    argv = [item for flag, values in base.items() for item in (flag, *values)] + args
    assert sweep.main(argv) == 2
    assert message in capsys.readouterr().err
    assert files_under(tmp_path) == []


def test_empty_grid_exits_2(tmp_path, capsys):
    assert sweep.main(["--algos", "ppo", "--envs", "CartPole-v1", "--seeds", "-f", str(tmp_path / "logs")]) == 2
    assert "--seeds" in capsys.readouterr().err
    with pytest.raises(ValueError, match="empty grid: --delays has no values"):
        sweep.sweep_grid(["ppo"], ["CartPole-v1"], [], [0])
    assert files_under(tmp_path) == []


def test_gpus_per_run_on_a_cluster_without_gpus_exits_2(ray_session, tmp_path, capsys):
    argv = ["--algos", "ppo", "--envs", "CartPole-v1", "-f", str(tmp_path / "logs"), "--gpus-per-run", "0.5"]
    assert sweep.main(argv) == 2
    assert "--gpus-per-run 0.5, but the Ray cluster has no GPUs" in capsys.readouterr().err
    assert files_under(tmp_path) == []


def test_without_ray_sweep_exits_2_with_the_install_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    assert sweep.main(["--algos", "ppo", "--envs", "CartPole-v1", "-f", str(tmp_path / "logs")]) == 2
    assert 'pip install "delayzoo[ray]"' in capsys.readouterr().err
    assert files_under(tmp_path) == []


@pytest.mark.slow
def test_ctrl_c_lets_the_running_run_save_and_the_next_launch_resumes_it(tmp_path):
    grid = [
        "--algos",
        "ppo",
        "--envs",
        "CartPole-v1",
        "--delays",
        "2",
        "-f",
        "logs",
        "--eval-n-episodes",
        "2",
        "--eval-checkpoints",
        "last",
        "--save-freq",
        "500",
        *TINY_PPO,
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "delayzoo.zoo.sweep", *grid, "-n", "200000"],
        cwd=tmp_path,
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run = tmp_path / "logs/ppo_CartPole-v1_delay2_seed0/ppo/CartPole-v1_1"
    deadline = time.monotonic() + 180
    while not list(run.glob("rl_model_*_steps.zip")) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=240)
    assert process.returncode == 130, output[-3000:]
    assert "Sweep stopped. To resume it, run the same command again:" in output
    stopped_at = saved_steps(run / "CartPole-v1.zip")  # saved at Ctrl-C
    assert 500 <= stopped_at < 200_000

    resumed = run_module("delayzoo.zoo.sweep", *grid, "-n", str(stopped_at + 256), cwd=tmp_path, timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    second = run.parent / "CartPole-v1_2"
    assert read_run_yaml(second / "CartPole-v1" / "args.yml")["resume_timesteps"] == stopped_at
    assert saved_steps(second / "CartPole-v1.zip") == stopped_at + 256
