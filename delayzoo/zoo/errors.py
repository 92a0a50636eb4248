"""The error the zoo's command lines turn into exit code 2."""

from __future__ import annotations

__all__ = ["ZooError", "check_device_flag", "check_threads_flag", "one_line", "set_threads_flag"]


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


def check_threads_flag(threads: int) -> None:
    """A :class:`ZooError` for a ``--num-threads`` other than -1 (torch's default) or a count >= 1."""
    if threads != -1 and threads < 1:
        raise ZooError(f"--num-threads must be >= 1 (or -1: torch's default), got {threads}")


def set_threads_flag(threads: int) -> None:
    """Apply a checked ``--num-threads``: torch's thread count when >= 1 (torch's own choice at -1). One thread is
    what a busy or small machine wants: torch's default runs a thread per core, each waiting for the others."""
    check_threads_flag(threads)
    if threads == -1:
        return
    import torch  # only for the commands that run models

    torch.set_num_threads(threads)
