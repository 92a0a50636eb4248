"""The ``delayzoo`` console script: ``delayzoo COMMAND [options]``, one command per module of the zoo.

:data:`COMMANDS` is the one table of the commands: the console script's help and dispatch, the docs' list and
the tests read it; ``python -m delayzoo.zoo.<module>`` runs the same ``main``.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "Command", "main", "usage"]


@dataclasses.dataclass(frozen=True)
class Command:
    """A zoo command: the module whose ``main(argv, prog)`` runs it, and what it does."""

    module: str
    summary: str

    def main(self, argv: Sequence[str], prog: str) -> int:
        """Run the command (its module is imported only now: torch and Ray load only where used)."""
        return int(importlib.import_module(f"delayzoo.zoo.{self.module}").main(list(argv), prog=prog))


COMMANDS: dict[str, Command] = {
    "train": Command("train", "train an algorithm on an env, optionally under delays (rl_zoo3's flags + delay flags)"),
    "eval": Command("eval", "evaluate every checkpoint of a run into eval_result/<algo>/<run>.csv"),
    "plot": Command("plot", "learning curves (PNG), return against delay, and the Atari 100k summary (markdown)"),
    "enjoy": Command("enjoy", "watch a trained agent in the env (and delay) it was trained in"),
    "record_video": Command("record_video", "record a video of a trained agent in the env (and delay) it trained in"),
    "sweep": Command("sweep", "a grid of train + eval runs (algorithms x envs x delays x seeds) on Ray"),
    "study": Command("study", "the delay benchmark: delay-aware against delay-oblivious agents (a sweep, then plots)"),
    "random_play": Command("random_play", "random play's returns at every env and delay of a study's runs"),
}
"""The zoo's commands, by the name ``delayzoo NAME`` takes (the module is ``delayzoo.zoo.<module>``)."""


def usage() -> str:
    """The console script's help, from :data:`COMMANDS`."""
    width = max(len(name) for name in COMMANDS) + 2
    lines = [f"  {name:<{width}} {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join([
        f"usage: delayzoo {{{','.join(COMMANDS)}}} [options]", "", *lines, "",
        "'delayzoo COMMAND -h' shows the options of a command.",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the command's ``main``; return its exit code (2 for an unknown command).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name in COMMANDS:
        return COMMANDS[name].main(rest, prog=f"delayzoo {name}")
    close = difflib.get_close_matches(name, list(COMMANDS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    print(f"delayzoo: error: unknown command {name!r}{hint}\n\n{usage()}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
