"""TraceDelay: replaying recorded delays (from a list, measured latencies or a CSV file), and the shipped trace."""

from __future__ import annotations

import configparser
import csv
import pathlib
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest

from delayzoo.wrappers import ExecutionDelay, ObservationDelay, TraceDelay, example_trace_path

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_without_loop_the_trace_plays_from_its_start_and_its_last_value_repeats():
    process = TraceDelay([3, 0, 2], loop=False)
    rng = np.random.default_rng(0)
    for _ in range(2):  # every reset starts again
        assert [process.reset(rng)] + [process.step(rng) for _ in range(5)] == [3, 0, 2, 2, 2, 2]
    assert process.max_delay == 3


def test_with_loop_each_reset_draws_a_start_and_the_trace_wraps_around():
    process = TraceDelay(list(range(10)))
    starts = set()
    for seed in range(20):
        rng = np.random.default_rng(seed)
        path = [process.reset(rng)] + [process.step(rng) for _ in range(12)]
        assert path == [(path[0] + k) % 10 for k in range(13)]
        starts.add(path[0])
    assert len(starts) > 3


def test_from_latencies_rounds_up_to_whole_steps_and_caps():
    latencies = [0.0, 0.001, 0.02, 0.021, 0.06, 0.5]
    assert TraceDelay.from_latencies(latencies, step_duration=0.02).delays.tolist() == [0, 1, 1, 2, 3, 25]
    capped = TraceDelay.from_latencies(latencies, step_duration=0.02, max_delay=4)
    assert capped.delays.tolist() == [0, 1, 1, 2, 3, 4] and capped.max_delay == 4


def test_from_csv_reads_a_column_by_name_or_index(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("time,delay\n0.0,2\n0.1,0\n\n0.2,5\n")
    assert TraceDelay.from_csv(path, column="delay").delays.tolist() == [2, 0, 5]
    assert TraceDelay.from_csv(str(path), column=1, loop=False).loop is False


def test_the_shipped_trace_is_what_its_script_makes_and_is_package_data(tmp_path):
    path = example_trace_path()
    remade = tmp_path / "remade.csv"
    subprocess.run([sys.executable, str(path.with_name("make_example_trace.py")), str(remade)], check=True, cwd=REPO)
    assert remade.read_bytes() == path.read_bytes()
    process = TraceDelay.from_csv(path)
    with open(path, newline="") as file:
        latencies = [float(row["latency_ms"]) for row in csv.DictReader(file)]
    assert len(process.delays) == 1000 and process.max_delay == 6 and process.delays.min() >= 1
    assert TraceDelay.from_latencies(latencies, 20.0, max_delay=6).delays.tolist() == process.delays.tolist()
    setup = configparser.ConfigParser()
    setup.read(REPO / "setup.cfg")
    declared = setup["options.package_data"]["delayzoo"].replace(",", " ").split()
    assert any(path.relative_to(REPO / "delayzoo").match(pattern) for pattern in declared)


@pytest.mark.parametrize("wrapper", [ExecutionDelay, ObservationDelay])
def test_it_drives_both_kinds_of_delay(wrapper):
    env = wrapper(gym.make("CartPole-v1"), TraceDelay.from_csv(example_trace_path()))
    assert env.max_delay == 6
    _, info = env.reset(seed=0)
    key = "delay" if wrapper is ExecutionDelay else "obs_delay"
    seen = [env.step(0)[4][key] for _ in range(8)]
    assert all(0 <= value <= 6 for value in seen)


@pytest.mark.parametrize(
    "make, error, fragment",
    [
        (lambda: TraceDelay([1, -2, 3]), ValueError, "delays[1] must be | got -2"),
        (lambda: TraceDelay([1, 2.5]), TypeError, "delays[1] must be an integer, got 2.5"),
        (lambda: TraceDelay([]), ValueError, "empty"),
        (lambda: TraceDelay.from_latencies([0.01, -0.02], 0.02), ValueError, "latencies[1] = -0.02"),
        (lambda: TraceDelay.from_latencies([float("nan")], 0.02), ValueError, "latencies[0] = nan"),
        (lambda: TraceDelay.from_latencies([0.01], 0), ValueError, "step_duration"),
        (lambda: TraceDelay.from_latencies([0.01], 0.02, max_delay=-1), ValueError, "max_delay"),
    ],
)
def test_bad_entries_raise_naming_them(make, error, fragment):
    with pytest.raises(error) as raised:
        make()
    assert all(part in str(raised.value) for part in fragment.split(" | ")), str(raised.value)


@pytest.mark.parametrize(
    "text, column, error, fragment",
    [
        ("delay\n1\n2.5\n", "delay", TypeError, "line 3 must be an integer, got 2.5"),
        ("delay\n1\n-4\n", "delay", ValueError, "line 3 must be in >= 0, got -4"),
        ("delay\n1\nslow\n", "delay", ValueError, "'slow'"),
        ("delay\n1\n", "latency", ValueError, "no column 'latency'"),
        ("delay\n1\n", 3, ValueError, "column must be in [0, 0], got 3"),
        ("", "delay", ValueError, "is empty"),
    ],
)
def test_bad_csv_files_raise_naming_the_line_and_value(tmp_path, text, column, error, fragment):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(error) as raised:
        TraceDelay.from_csv(path, column=column)
    assert fragment in str(raised.value)
