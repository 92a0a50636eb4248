"""``benchmarks/entry_study.py``: extra train and eval flags reach the commands as the zoo reads them."""

from __future__ import annotations

from tests.benchmarks.scripts import load_script


def test_quoted_train_and_eval_flags_are_split_into_the_commands(monkeypatch, tmp_path):
    script = load_script("entry_study")
    commands = []
    monkeypatch.setattr(script, "_run", lambda argv: commands.append(argv) or 0.0)
    monkeypatch.setattr(script, "read_curve", lambda path: ([[10, 1.0], [20, 2.0], [30, 3.0]], []))
    script.main(["--algo", "delayed_ez", "--seeds", "7", "-f", str(tmp_path), "--train-args", "--preset benchmark",
                 "--eval-args", "--n-envs 8", "--eval-args=--verbose=0", "-params", "gamma:0.9"])
    train, evaluate = commands
    assert train[-4:] == ["--preset", "benchmark", "-params", "gamma:0.9"]
    assert evaluate[-3:] == ["--n-envs", "8", "--verbose=0"]
