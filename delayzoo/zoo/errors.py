"""The error the zoo's command lines turn into exit code 2."""

from __future__ import annotations

__all__ = ["ZooError"]


class ZooError(ValueError):
    """Bad input to a zoo command (unknown name, contradictory flags, incompatible files).

    Raised before anything is written; the command lines print the message and exit with code 2.
    """
