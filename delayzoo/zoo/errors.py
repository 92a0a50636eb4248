"""The error the zoo's command lines turn into exit code 2."""

from __future__ import annotations

__all__ = ["ZooError", "check_device_flag", "one_line"]


class ZooError(ValueError):
    """Bad input to a zoo command (unknown name, contradictory flags, incompatible files).

    Raised before anything is written; the command lines print the message and exit with code 2.
    """


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (the command lines print bad input as a single line)."""
    return " ".join(str(error).split())


def check_device_flag(device: str) -> None:
    """A :class:`ZooError` for a ``--device`` naming a CUDA device torch does not see, where SB3 would train on
    the CPU without a word (:func:`~delayzoo.agents.common.checks.check_device`)."""
    from delayzoo.agents.common.checks import check_device  # torch: only for the commands that have --device

    try:
        check_device(device, "--device")
    except ValueError as error:
        raise ZooError(str(error)) from None
