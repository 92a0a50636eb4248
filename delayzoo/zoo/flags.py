"""The flags several zoo commands share that choose where a model runs: ``--device`` and ``--num-threads``.

Each check raises a :class:`~delayzoo.zoo.errors.ZooError` naming the bad value (exit code 2); torch is imported
only when a value is applied.
"""

from __future__ import annotations

from delayzoo.zoo.errors import ZooError

__all__ = ["check_device_flag", "check_threads_flag", "set_threads_flag"]


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
