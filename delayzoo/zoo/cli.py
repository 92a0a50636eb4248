"""The ``delayzoo`` console script: ``delayzoo train|eval|plot|enjoy|record_video|sweep|study [options]``."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence

__all__ = ["main"]

USAGE = """usage: delayzoo {train,eval,plot,enjoy,record_video,sweep,study} [options]

  train          train an algorithm on an env, optionally under execution delay (rl_zoo3's flags + delay flags)
  eval           evaluate every checkpoint of a run into eval_result/<algo>/<run>.csv
  plot           learning curves (PNG), return against delay, and the Atari 100k summary table (markdown)
  enjoy          watch a trained agent in the env (and delay) it was trained in
  record_video   record a video of a trained agent in the env (and delay) it was trained in
  sweep          a grid of train + eval runs (algorithms x envs x delays x seeds) on Ray
  study          the delay benchmark: delay-aware against delay-oblivious agents (a sweep, then its plot)

'delayzoo COMMAND -h' shows the options of a command."""


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the command's ``main``; return its exit code (2 for an unknown command).

    :param argv: the arguments (default: ``sys.argv[1:]``)
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        from delayzoo.zoo import train

        return train.main(rest, prog="delayzoo train")
    if command == "eval":
        from delayzoo.zoo import eval as evaluate

        return evaluate.main(rest, prog="delayzoo eval")
    if command == "plot":
        from delayzoo.zoo import plot

        return plot.main(rest, prog="delayzoo plot")
    if command in ("enjoy", "record_video"):
        from delayzoo.zoo import enjoy

        return enjoy.main(rest, prog=f"delayzoo {command}", record=command == "record_video")
    if command == "sweep":
        from delayzoo.zoo import sweep

        return sweep.main(rest, prog="delayzoo sweep")
    if command == "study":
        from delayzoo.zoo import study

        return study.main(rest, prog="delayzoo study")
    commands = ["train", "eval", "plot", "enjoy", "record_video", "sweep", "study"]
    close = difflib.get_close_matches(command, commands, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    print(f"delayzoo: error: unknown command {command!r}{hint}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
