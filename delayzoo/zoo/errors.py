"""How the zoo's commands end: bad input (a :class:`ZooError`) is one line and exit code 2, everywhere.

Every command's ``main`` runs its work through :func:`run_command`. This module imports neither torch nor
Stable-Baselines3.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

__all__ = ["ZooError", "one_line", "run_command"]


class ZooError(ValueError):
    """Bad input to a zoo command (unknown name, contradictory flags, incompatible files).

    Raised before anything is written; the command lines print the message and exit with code 2.
    """


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (the command lines print bad input as a single line)."""
    return " ".join(str(error).split())


def run_command(prog: str, work: Callable[[], int | None]) -> int:
    """Run a command's ``work`` and return its exit code: the code it returns (``None``: 0); 2 for bad input, a
    :class:`ZooError` printed as one line ``<prog>: error: <message>`` (argparse prints its usage lines first
    and exits 2 by itself); the code of a ``SystemExit`` (``None``: 0; a message is printed, and the code is 1).
    """
    try:
        return work() or 0
    except ZooError as error:
        print(f"{prog}: error: {one_line(error)}", file=sys.stderr)
        return 2
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
