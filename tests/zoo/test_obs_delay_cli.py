"""Observation delays and delay traces in the zoo: the flags build ObservationDelay(ExecutionDelay(env)) and the
view, config.yml records them and eval rebuilds the env, grid cells name them, a bad trace file exits 2 naming it
(the other bad values are cases of test_bad_input.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gymnasium import spaces

from delayzoo.wrappers import (
    ExecutionDelay,
    ObservationDelay,
    PendingActionsObservation,
    RandomWalkDelay,
    TraceDelay,
    example_trace_path,
    find_execution_delay,
    find_observation_delay,
)
from delayzoo.zoo import plot, sweep, train
from delayzoo.zoo.delay_settings import DelaySettings
from delayzoo.zoo.envs import make_zoo_env
from delayzoo.zoo.grid import Cell, load_grid
from delayzoo.zoo.rl_zoo3_wrappers import REPLAY_STACK
from delayzoo.zoo.runs import select_run
from delayzoo.zoo.vec_envs import make_eval_env
from tests.zoo.helpers import TINY_PPO
from tests.zoo.test_bad_input import BOUNDED
from tests.zoo.test_plot import fake_cell

TRACE = str(example_trace_path())
BOTH = ["--delay", "2", "--obs-delay", "3", "--obs-delay-process", "random-walk", "--obs-delay-p", "0.3",
        "--obs-min-delay", "1", "--pending-view"]


def _layers(env) -> list:
    layers = [env]
    while hasattr(layers[-1], "env"):
        layers.append(layers[-1].env)
    return layers


def test_the_settings_put_the_observation_delay_over_the_execution_delay_and_the_view_on_top():
    settings = DelaySettings(delay=2, obs_delay=3, obs_process="random-walk", obs_p=0.3, obs_min_delay=1,
                             pending_view=True)
    env = make_zoo_env("CartPole-v1", settings)
    assert [type(layer) for layer in _layers(env)[:3]] == [PendingActionsObservation, ObservationDelay, ExecutionDelay]
    process = find_observation_delay(env).delay_process
    assert isinstance(process, RandomWalkDelay) and (process.max_delay, process.p, process.min_delay) == (3, 0.3, 1)
    assert find_execution_delay(env).max_delay == 2
    assert settings.label() == "delay=2, obs-random-walk delay 1..3 p=0.3 +view"
    alone = make_zoo_env("CartPole-v1", DelaySettings(obs_delay=2, pending_view=True))
    assert [type(layer) for layer in _layers(alone)[:3]][:2] == [PendingActionsObservation, ObservationDelay]
    assert find_execution_delay(alone) is None


def test_trace_flags_replay_the_file_as_either_delay_and_record_its_absolute_path(tmp_path, monkeypatch):
    copy = tmp_path / "trace.csv"
    copy.write_text(Path(TRACE).read_text())
    monkeypatch.chdir(tmp_path)
    settings = DelaySettings.from_dict({"trace": "trace.csv", "obs_trace": "trace.csv"}, "the delay flags")
    record = settings.to_record()
    largest = TraceDelay.from_csv(copy).max_delay
    assert record["trace"] == record["obs_trace"] == str(copy)
    assert (record["delay"], record["process"], record["obs_delay"], record["obs_process"]) == (
        largest, "trace", largest, "trace")
    assert DelaySettings.from_dict(record, "a record").to_record() == record  # a record reads back as itself
    env = make_zoo_env("CartPole-v1", settings)
    assert isinstance(find_execution_delay(env).delay_process, TraceDelay)
    assert isinstance(find_observation_delay(env).delay_process, TraceDelay)


def test_a_record_without_observation_delay_or_trace_keeps_todays_keys():
    assert set(DelaySettings(delay=2).to_record()) == {"delay", "process", "p", "min_delay", "pending_view",
                                                       "init_action"}


@pytest.fixture(scope="module")
def both_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``logs/`` of a 128-step PPO run on CartPole-v1 under both delays, with the view."""
    folder = tmp_path_factory.mktemp("both_run")
    argv = ["--algo", "ppo", "--env", "CartPole-v1", "-n", "128", "--seed", "0", "--eval-freq", "-1",
            "--num-threads", "1", "-f", str(folder / "logs"), *BOTH, "--delay-trace", TRACE, *TINY_PPO]
    argv.remove("--delay"), argv.remove("2")  # the trace is the execution delay
    assert train.main(argv) == 0
    return folder / "logs"


def test_config_records_both_delays_and_eval_rebuilds_the_same_env(both_run):
    run = select_run(both_run, "ppo", "CartPole-v1")
    recorded = run.config["delay"]
    assert (recorded["process"], recorded["trace"]) == ("trace", TRACE)
    assert (recorded["obs_delay"], recorded["obs_process"], recorded["obs_p"], recorded["obs_min_delay"]) == (
        3, "random-walk", 0.3, 1)
    assert run.delay_settings().to_record() == recorded
    assert run.config["env_wrapper"] == [{REPLAY_STACK: recorded}]
    env = make_eval_env(run)
    try:
        inner = env.envs[0]
        assert [type(layer) for layer in _layers(inner)[:3]] == [
            PendingActionsObservation, ObservationDelay, ExecutionDelay]
        assert isinstance(find_execution_delay(inner).delay_process, TraceDelay)
        observation = find_observation_delay(inner).delay_process
        assert (observation.max_delay, observation.p, observation.min_delay) == (3, 0.3, 1)
        assert isinstance(env.observation_space, spaces.Dict) and "obs_delay" in env.observation_space.spaces
    finally:
        env.close()


@pytest.mark.parametrize("flag", ["--delay-trace", "--obs-delay-trace"])
@pytest.mark.parametrize("content, message", [("delay\n1\n-2\n", "line 3, column 'delay' must be"),
                                              ("delay\n1.5\n", "line 2, column 'delay' must be an integer, got 1.5"),
                                              ("latency\n1\n", "has no column 'delay'"),
                                              ("latency_ms,delay\n5,1\n7\n9,2\n", "line 3 has 1 cell(s)"),
                                              ("latency_ms,delay\n", "no delays in column 'delay'")])
def test_a_bad_trace_file_exits_2_naming_the_flag_the_file_and_the_entry(flag, content, message, tmp_path, capsys):
    trace = tmp_path / "bad.csv"
    trace.write_text(content)
    assert train.main([flag, str(trace), "-f", str(tmp_path / "logs"), *BOUNDED]) == 2
    error = capsys.readouterr().err
    lines = error.strip().splitlines()
    assert f"{flag} {trace} in the delay flags: " in lines[-1] and lines[-1].count(str(trace)) == 2, error
    assert message in lines[-1], error
    assert len([line for line in lines if not line.startswith(("usage:", " "))]) == 1 and "Traceback" not in error
    assert not (tmp_path / "logs").exists()  # no run folder left


GRID = """
seeds: [0]
delay_process: random-walk
delay_args: [--init-action, random]
envs:
  CartPole-v1: {delays: [0, 3]}
variants:
  ppo: {algo: ppo}
  ppo-obs: {algo: ppo, delay_kind: observation}
  ppo-obs+view: {algo: ppo, pending_view: true, delay_kind: observation}
"""


def test_grid_cells_with_an_observation_delay_have_their_own_names_and_flags(tmp_path):
    path = tmp_path / "grid.yml"
    path.write_text(GRID)
    cells = {cell.name: cell for cell in load_grid(path).cells()}
    assert list(cells) == ["ppo_CartPole-v1_random-walk0_seed0", "ppo_CartPole-v1_random-walk3_seed0",
                           "ppo-obs_CartPole-v1_obs-random-walk3_seed0",
                           "ppo-obs+view_CartPole-v1_obs-random-walk3+view_seed0"]
    argv = sweep.train_argv(cells["ppo-obs+view_CartPole-v1_obs-random-walk3+view_seed0"], tmp_path, [])
    assert "--obs-delay 3 --obs-delay-process random-walk" in " ".join(argv)
    assert "--delay" not in argv and "--init-action" not in argv  # delay_args are the execution delay's
    assert cells["ppo-obs_CartPole-v1_obs-random-walk3_seed0"].record()["delay_kind"] == "observation"
    path.write_text(GRID.replace("delay_kind: observation}", "delay_kind: sensor}"))
    with pytest.raises(Exception, match="delay_kind must be one of"):
        load_grid(path)


def test_a_plain_sweep_names_observation_delays_and_refuses_obs_flags_passed_through(tmp_path):
    args = sweep.parser().parse_args(["--algos", "ppo", "--envs", "CartPole-v1", "--delays", "2",
                                      "--delay-kind", "observation"])
    (cell,) = sweep.grid_cells(args)
    assert cell.name == "ppo_CartPole-v1_obs-delay2_seed0"
    assert sweep.main(["--algos", "ppo", "--envs", "CartPole-v1", "-f", str(tmp_path), "--obs-delay", "2"]) == 2


def test_by_delay_lines_tell_the_two_kinds_apart(tmp_path):
    logs = tmp_path / "logs"
    for delay in (0, 3):
        fake_cell(logs, Cell("ppo", "CartPole-v1", delay, "random-walk", False, 0, "ppo"), [[100.0]])
    fake_cell(logs, Cell("ppo", "CartPole-v1", 3, "random-walk", False, 0, "ppo-obs", delay_kind="observation"),
              [[50.0]])
    lines = plot.delay_results(plot.find_runs(logs))["CartPole-v1"]
    assert set(lines) == {"ppo", "ppo-obs (obs delay)"}
    assert lines["ppo-obs (obs delay)"].points[3] == [50.0] and lines["ppo"].points[3] == [100.0]
