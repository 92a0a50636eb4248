"""Both agents report their first update's time and the projected run time, and warn before a long CPU run."""

from __future__ import annotations

import warnings

import pytest

from delayzoo.agents.common import run_time
from delayzoo.agents.common.run_time import duration
from tests.agents.pwm.test_pwm_agent import logged_keys
from tests.agents.test_checks import AGENTS


@pytest.mark.parametrize("algo", sorted(AGENTS))
def test_first_update_projects_the_run_time_and_warns_for_a_large_model_on_a_cpu(algo, monkeypatch, capsys):
    agent, fast = AGENTS[algo]
    name = agent.__name__
    steps = fast["learning_starts"] + 32
    model = agent("MlpPolicy", "CartPole-v1", **{**fast, "verbose": 1})
    recorder = logged_keys(model)
    model.learn(steps)
    out = capsys.readouterr().out
    assert out.count(f"{name}: one update took") == 1 and f"more for the requested {steps} steps" in out
    model.dump_logs()
    assert any("time/seconds_per_update" in record for record in recorder.records)
    quiet = agent("MlpPolicy", "CartPole-v1", **fast)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a small model stays quiet
        quiet.learn(steps)
    monkeypatch.setattr(run_time, "LONG_RUN_SECONDS", 0.0)  # as if a paper-size model ran on this CPU
    monkeypatch.setattr(run_time, "LARGE_MODEL_PARAMETERS", 0)
    with pytest.warns(UserWarning, match=rf"{name}: one update took .* s \(.* s process CPU.*about \d+ more.*GPU"):
        quiet.learn(steps)


@pytest.mark.parametrize(
    "seconds, text", [(40, "40 s"), (150, "2 min"), (3 * 3600, "3.0 h"), (61 * 86400, "61.0 days")]
)
def test_durations_are_written_in_the_largest_fitting_unit(seconds, text):
    assert duration(seconds) == text
