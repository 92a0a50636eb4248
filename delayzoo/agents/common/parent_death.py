"""Child processes that end with their parent, however the parent ends (SIGKILL included).

A killed training process cannot stop its helpers itself: the child must notice. On Linux
:func:`set_parent_death_signal` has the kernel signal the child when its parent dies
(``prctl(PR_SET_PDEATHSIG)``); :func:`exit_with_parent` uses it, and elsewhere a daemon thread that sees
``os.getppid()`` change. Used by DelayedEZ's reanalysis worker process (``prefetch="process"``) and by the
commands a sweep starts.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time

__all__ = ["exit_with_parent", "set_parent_death_signal"]

_PR_SET_PDEATHSIG = 1


def set_parent_death_signal(number: int) -> bool:
    """Ask the kernel to send signal ``number`` to this process when the thread that started it ends (Linux);
    ``False`` where the request is not available.

    Safe between ``fork`` and ``exec`` (a ``preexec_fn``); the request survives ``exec``.
    """
    try:
        return ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(number)) == 0
    except (OSError, AttributeError):  # no prctl here
        return False


def _watch_parent(parent_pid: int, number: int, interval: float) -> None:
    while os.getppid() == parent_pid:  # an orphan is adopted by another process
        time.sleep(interval)
    os.kill(os.getpid(), number)


def exit_with_parent(parent_pid: int, number: int, *, kernel: bool = True, interval: float = 0.5) -> None:
    """Have signal ``number`` end this process (a child of ``parent_pid``) when its parent dies.

    :param parent_pid: the parent's pid, taken before the child was started (it may already be dead)
    :param number: the signal; its handler in this process must end it (e.g. ``SIG_DFL`` for ``SIGTERM``)
    :param kernel: use the kernel's parent-death signal where there is one. Pass ``False`` when the parent
        started this process from a thread other than its main one: the kernel signals when that thread ends
    :param interval: seconds between the fallback thread's checks
    """
    if kernel and set_parent_death_signal(number):
        if os.getppid() != parent_pid:  # died before the request
            os.kill(os.getpid(), number)
        return
    threading.Thread(
        target=_watch_parent, args=(parent_pid, number, interval), name="delayzoo-parent-watch", daemon=True
    ).start()
