"""The zoo's commands, from their one table (:data:`delayzoo.zoo.cli.COMMANDS`): the console script dispatches to
each, and every one refuses a bad flag value the same way: exit code 2, one error line naming the flag (after
argparse's usage lines where argparse found it), no traceback, nothing written."""

from __future__ import annotations

import pytest

from delayzoo.zoo import cli
from tests.zoo.helpers import files_under

RUN = ["--algo", "ppo", "--env", "CartPole-v1"]
BAD_VALUES = {
    # command: [(arguments with one bad value, the words that must name it), ...]: a value argparse refuses
    # (of the wrong type) and one the command's own checks refuse
    "train": [([*RUN, "--num-threads", "many"], "--num-threads"), ([*RUN, "--delay", "-2"], "--delay")],
    "eval": [([*RUN, "-n", "many"], "-n/--n-episodes"), ([*RUN, "--n-envs", "0"], "--n-envs")],
    "plot": [(["--window", "wide"], "--window"), (["--by-delay", "--at-steps", "CartPole-v1=abc"], "--at-steps")],
    "enjoy": [([*RUN, "--seed", "one"], "--seed"), ([*RUN, "--num-threads", "0"], "--num-threads")],
    "record_video": [([*RUN, "-n", "many"], "-n/--n-timesteps"), ([*RUN, "--seed", "-1"], "--seed")],
    "sweep": [(["--algos", "ppo", "--envs", "CartPole-v1", "--delays", "two"], "--delays"),
              (["--algos", "ppo", "--envs", "CartPole-v1", "--cpus-per-run", "0"], "--cpus-per-run")],
    "study": [(["--eval-n-episodes", "many"], "--eval-n-episodes"), (["--grid", "no-such-grid.yml"], "no-such-grid")],
    "random_play": [(["-n", "many"], "-n/--n-episodes"), (["-n", "0"], "-n")],
}


def test_the_table_is_the_console_scripts_and_the_docs_list():
    assert set(BAD_VALUES) == set(cli.COMMANDS)
    assert all(f"  {name} " in cli.usage() for name in cli.COMMANDS)
    zoo_page = (pytest.importorskip("tests.docs.blocks").REPO / "docs" / "zoo.md").read_text()
    assert all(f"`python -m delayzoo.zoo.{command.module}`" in zoo_page for command in cli.COMMANDS.values())


@pytest.mark.parametrize("case", [0, 1], ids=["argparse", "own-check"])
@pytest.mark.parametrize("name", sorted(cli.COMMANDS))
def test_every_command_refuses_a_bad_flag_value_with_exit_2_and_one_error_line(name, case, tmp_path, capsys,
                                                                               monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv, named = BAD_VALUES[name][case]
    folder = ["-f", str(tmp_path / "logs")]
    assert cli.main([name, *argv, *folder]) == 2
    out, err = capsys.readouterr()
    errors = [line for line in err.strip().splitlines() if not line.startswith(("usage:", " "))]
    assert len(errors) == 1 and "Traceback" not in err + out, err
    assert errors[0].startswith(f"delayzoo {name}: error: ") and named in errors[0], err
    assert files_under(tmp_path / "logs") == []
