"""Every ``python -m delayzoo...`` command in the shell blocks of the README and the docs parses its flags.

Each command is given to its own parsers: ``train`` runs up to the point where rl_zoo3 builds its
experiment manager (the zoo's parser, its checks of the algorithm, env and delay flags, then rl_zoo3's
parser), ``sweep`` plans its grid with ``--dry-run`` (which runs ``train``'s checks on every cell), and
the other commands' parsers read their arguments. The README's main job also runs, capped (slow).
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys

import pytest
import torch

from tests.docs.blocks import PAGES, REPO, SHELL_LANGUAGES, code_blocks, shell_commands
from tests.docs.capped import STEPS_VARIABLE

COMMANDS = [
    pytest.param(command, id=f"{block.where}:{command[0].rsplit('.', 1)[-1]}")
    for page in PAGES
    for block in code_blocks(page)
    if block.language in SHELL_LANGUAGES
    for command in shell_commands(block)
]


class _Parsed(Exception):
    """Raised in place of rl_zoo3's experiment manager: the command line was read and checked."""


def _parse_train(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from delayzoo.zoo import train

    def manager(args, *positional, **keywords):
        raise _Parsed(args)

    monkeypatch.setattr(train, "DelayExperimentManager", manager)
    threads = torch.get_num_threads()
    try:
        code = train.main(argv)
    except _Parsed:
        return
    finally:
        torch.set_num_threads(threads)  # rl_zoo3 applies --num-threads before the manager
    raise AssertionError(f"train stopped with exit code {code} before starting")


def _parse(module: str, argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    if module == "delayzoo.zoo.train":
        _parse_train(argv, monkeypatch)
    elif module == "delayzoo.zoo.sweep":
        from delayzoo.zoo import sweep

        assert sweep.main([*argv, "--dry-run"]) == 0
    elif module == "delayzoo.zoo.study":
        from delayzoo.zoo import study

        assert study.main([*argv, "--dry-run"]) == 0
    elif module in ("delayzoo.zoo.eval", "delayzoo.zoo.plot", "delayzoo.zoo.random_play"):
        parser = __import__(module, fromlist=["parser"]).parser
        parser().parse_args(argv)
    elif module in ("delayzoo.zoo.enjoy", "delayzoo.zoo.record_video"):
        from delayzoo.zoo import enjoy

        enjoy.parser(record=module.endswith("record_video")).parse_args(argv)
    else:
        raise AssertionError(f"no parser check for {module}: add it to tests/docs/test_commands.py")


def test_commands_are_found():
    modules = {values[0][0] for values in (param.values for param in COMMANDS)}
    assert {"delayzoo.zoo.train", "delayzoo.zoo.eval", "delayzoo.zoo.plot", "delayzoo.zoo.sweep"} <= modules


@pytest.mark.parametrize("command", COMMANDS)
def test_the_command_parses(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    module, *argv = command
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            _parse(module, argv, monkeypatch)
    except SystemExit as exit_:  # argparse's error exit
        raise AssertionError(f"{module} {' '.join(argv)}: {capsys.readouterr().err}") from exit_


def _readme_main_job() -> list[list[str]]:
    (block, *_) = (block for block in code_blocks(REPO / "README.md") if block.language in SHELL_LANGUAGES)
    return shell_commands(block)[:2]


def test_the_readme_starts_with_the_main_job_and_the_test_command():
    first_lines = (REPO / "README.md").read_text().splitlines()[3:6]
    assert first_lines[0].startswith("bash scripts/setup.sh && .venv/bin/python -m delayzoo.zoo.train --algo pwm")
    assert first_lines[1] == "bash scripts/setup.sh && bash scripts/test.sh" and first_lines[2] == "```"
    assert [command[0] for command in _readme_main_job()] == ["delayzoo.zoo.train", "delayzoo.zoo.eval"]


@pytest.mark.slow
def test_the_readme_main_job_runs_capped(tmp_path):
    """The main job as written, training capped at 2,000 steps (its first checkpoint), then its eval."""
    environ = {**os.environ, STEPS_VARIABLE: "2000", "PYTHONPATH": str(REPO)}
    outputs = []
    for module, *argv in _readme_main_job():
        runner = [REPO / "tests/docs/capped.py"] if module.endswith("train") else []
        result = subprocess.run([sys.executable, *map(str, runner), "-m", module, *argv], cwd=tmp_path, env=environ,
                                capture_output=True, text=True, timeout=1200)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        outputs.append(result.stdout)
    run = tmp_path / "logs/pwm/CartPole-v1_1"
    assert (run / "rl_model_2000_steps.zip").is_file() and (run / "CartPole-v1.zip").is_file()
    rows = (tmp_path / "logs/eval_result/pwm/CartPole-v1_1.csv").read_text().splitlines()
    # the checkpoint and the final model are both at 2,000 steps: eval scores that model once, on 10 episodes
    assert rows[0].startswith("step,episode_0,") and len(rows[0].split(",")) == 11
    assert [row.split(",")[0] for row in rows[1:]] == ["2000"]
