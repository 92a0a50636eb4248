"""``benchmarks/pwm_forecast_error.py``: the future it compares the forecast with is the one the env reaches."""

from __future__ import annotations

import json

import pytest

from tests.benchmarks.scripts import load_script
from tests.zoo.helpers import run_module
from tests.zoo.test_agents_cli import TINY as AGENTS_TINY

TINY = AGENTS_TINY["pwm"].replace("CartPole-v1:", "Pendulum-v1:", 1)
"""The zoo tests' tiny PWM, on Pendulum."""


def _train(folder, *params):
    (folder / "tiny.yml").write_text(TINY)
    result = run_module(
        "delayzoo.zoo.train", "--algo", "pwm", "--env", "Pendulum-v1", "-conf", "tiny.yml", "--seed", "0",
        "--delay", "3", "--delay-process", "random-walk", "--init-action", "random", "--eval-freq", "-1",
        "--num-threads", "1", "-f", "logs", *params, cwd=folder,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return folder / "logs"


def test_box_actions_forecast_is_measured_against_the_observations_the_env_reaches(tmp_path, capsys):
    script = load_script("pwm_forecast_error")
    logs = _train(tmp_path, "--pending-view")
    record = tmp_path / "record.jsonl"
    assert script.main(["-f", str(logs), "--episodes", "1", "--modes", "forecast16", "oracle",
                        "--json", str(record)]) == 0
    (line,) = record.read_text().splitlines()
    result = json.loads(line)
    assert set(result["returns"]) == {"forecast16", "oracle"}
    assert all(len(returns) == 1 and -2000 < returns[0] < 0 for returns in result["returns"].values())
    table = result["table"]
    assert table["-1"]["copy_error"] == 0.0  # the copy stepped through the pending actions reaches o_{t+d}
    assert set(table) - {"-1"} <= {"1", "2", "3"} and "3" in table
    for delay in set(table) - {"-1"}:
        assert 0.0 <= table[delay]["match"] <= 1.0
        assert table[delay]["stale"] > 0.0 and table[delay]["decoded"] >= 0.0
    assert "max |copy's observation - reached observation|" in capsys.readouterr().out


def test_a_model_that_does_not_forecast_is_refused_by_its_mode(tmp_path):
    script = load_script("pwm_forecast_error")
    logs = _train(tmp_path, "-params", "delay_mode:'oblivious'")
    with pytest.raises(SystemExit, match="'oblivious' mode"):
        script.main(["-f", str(logs), "--episodes", "1"])
