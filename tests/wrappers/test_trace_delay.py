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

from delayzoo.wrappers import ExecutionDelay, ObservationDelay, RandomWalkDelay, TraceDelay, example_trace_path

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


def test_the_cap_applies_before_any_integer_conversion():
    # 1e300 / 0.02 overflows int64: capped first it is simply the cap; a latency under 1e-9 of a step is none
    capped = TraceDelay.from_latencies([0.01, 1e300, 1e-300, 0.0], step_duration=0.02, max_delay=5)
    assert capped.delays.tolist() == [1, 5, 0, 0]
    assert TraceDelay.from_latencies([1.0], 1e-300, max_delay=3).delays.tolist() == [3]
    assert TraceDelay.from_latencies([200.0], 0.02).delays.tolist() == [10_000]  # the bound itself is held


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
        (lambda: TraceDelay.from_latencies([0.01, 1e17], 0.02), ValueError, "latencies[1] = 1e+17 | 5e+18 steps"),
        (lambda: TraceDelay.from_latencies([0.01, 1e300], 0.02), ValueError, "latencies[1] = 1e+300"),
        (lambda: TraceDelay.from_latencies([1.0], 1e-300), ValueError, "latencies[0] = 1.0 | pass max_delay"),
        (lambda: TraceDelay.from_latencies([0.01, float("inf")], 0.02, 5), ValueError, "latencies[1] = inf"),
        (lambda: TraceDelay.from_latencies([], 0.02), ValueError, "at least one latency"),
        (lambda: TraceDelay.from_latencies(["fast"], 0.02), ValueError, "sequence of numbers"),
        (lambda: TraceDelay.from_latencies([0.01], float("inf")), ValueError, "step_duration"),
        (lambda: TraceDelay.from_latencies([0.01], -0.02), ValueError, "step_duration"),
        (lambda: TraceDelay.from_latencies([0.01], 0.02, max_delay=10**9), ValueError, "max_delay must be in"),
        (lambda: TraceDelay([3, 10_001]), ValueError, "delays[1] must be in [0, 10000], got 10001"),
        (lambda: TraceDelay(None), TypeError, "delays must be a sequence of integers, got None"),
        (lambda: TraceDelay("123"), TypeError, "delays must be a sequence of integers, got '123'"),
        (lambda: TraceDelay([1, 2], loop="no"), TypeError, "loop must be True or False, got 'no'"),
        (lambda: TraceDelay.from_latencies(None, 0.02), ValueError, "one-dimensional sequence of numbers, got None"),
        (lambda: TraceDelay.from_latencies([[0.1, 0.2]], 0.02), ValueError, "one-dimensional"),
        (lambda: ExecutionDelay(gym.make("CartPole-v1"), 10**12), ValueError, "must be in [0, 10000]"),
        (lambda: ObservationDelay(gym.make("CartPole-v1"), RandomWalkDelay(10**6)), ValueError, "[0, 10000]"),
    ],
)
def test_bad_entries_raise_naming_them(make, error, fragment):  # huge, tiny and negative latencies among them
    with pytest.raises(error) as raised:
        make()
    assert all(part in str(raised.value) for part in fragment.split(" | ")), str(raised.value)


@pytest.mark.parametrize(
    "text, column, error, fragment",
    [
        ("delay\n1\n2.5\n", "delay", TypeError, "line 3, column 'delay' must be an integer, got 2.5"),
        ("delay\n1\n-4\n", "delay", ValueError, "line 3, column 'delay' must be in [0, 10000], got -4"),
        ("delay\n1\n10001\n", "delay", ValueError, "line 3, column 'delay' must be in [0, 10000], got 10001"),
        ("delay\n1\nslow\n", "delay", ValueError, "'slow'"),
        ("delay\n1\n", "latency", ValueError, "no column 'latency'"),
        ("delay\n1\n", 3, ValueError, "column must be in [0, 0], got 3"),
        ("", "delay", ValueError, "is empty"),
        ("\n\n", "delay", ValueError, "is empty"),
        # a row short of the delay cell, and a row with a cell too many
        ("latency_ms,delay\n5,1\n7\n9,2\n", "delay", ValueError, "line 3 has 1 cell(s), ['7'], where the header has 2"),
        ("latency_ms,delay\n5,1\n7,2,3\n", "delay", ValueError, "line 3 has 3 cell(s)"),
        ("latency_ms,delay\n", "delay", ValueError, "no delays in column 'delay': only the header row"),
        ("latency_ms;delay\n5;1\n", "delay", ValueError, "columns must be separated by commas"),
        ("latency_ms\tdelay\n5\t1\n", "delay", ValueError, "no column 'delay'"),
        ("delay\n1\n\n", 0, ValueError, "nothing"),  # a trailing blank line is fine: see the test below
    ],
)
def test_bad_csv_files_raise_naming_the_file_line_and_value(tmp_path, text, column, error, fragment):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    if fragment == "nothing":
        assert TraceDelay.from_csv(path, column=column).delays.tolist() == [1]
        return
    with pytest.raises(error) as raised:
        TraceDelay.from_csv(path, column=column)
    assert fragment in str(raised.value) and str(path) in str(raised.value), str(raised.value)


def test_blank_lines_and_a_byte_order_mark_are_skipped_and_lines_keep_their_numbers(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_bytes("\ufefflatency_ms,delay\n\n5,1\n\n  \n7, 2\n".encode())
    assert TraceDelay.from_csv(path).delays.tolist() == [1, 2]
    path.write_bytes("\ufefflatency_ms,delay\n\n5,1\n\n7,x\n".encode())
    with pytest.raises(ValueError, match="line 5, column 'delay' must be an integer, got 'x'"):
        TraceDelay.from_csv(path)


def test_a_missing_or_unreadable_file_names_itself(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.csv"):
        TraceDelay.from_csv(tmp_path / "nowhere.csv")
    path = tmp_path / "binary.csv"
    path.write_bytes(b"delay\n\xff\xfe\x00\n")
    with pytest.raises(ValueError, match="binary.csv is not a UTF-8 text file"):
        TraceDelay.from_csv(path)
