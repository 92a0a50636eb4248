"""The error the zoo's command lines turn into exit code 2."""

from __future__ import annotations

__all__ = ["ZooError", "one_line"]


class ZooError(ValueError):
    """Bad input to a zoo command (unknown name, contradictory flags, incompatible files).

    Raised before anything is written; the command lines print the message and exit with code 2.
    """


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (the command lines print bad input as a single line)."""
    return " ".join(str(error).split())
