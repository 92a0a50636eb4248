"""Starting or joining Ray, one way for every part of delayzoo that uses it (DelayedEZ's actors, the sweep).

``address``: ``None`` reuses the Ray this process is connected to, or starts a local one (its workers
import delayzoo from this source tree); ``"auto"`` joins the cluster ``ray start`` runs on this machine;
``HOST:PORT`` or ``ray://HOST:PORT`` joins that cluster (checked with a quick TCP connection first, as Ray
itself retries for minutes). Ray is the optional extra ``delayzoo[ray]``.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = ["INSTALL_RAY", "UnreachableClusterError", "check_address", "connect", "import_ray"]

INSTALL_RAY = 'pip install "delayzoo[ray]"'
"""How to install Ray with delayzoo (the extra ``delayzoo[ray]``)."""


class UnreachableClusterError(ConnectionError):
    """The Ray cluster at ``address`` cannot be reached (``reason``: why)."""

    def __init__(self, address: str | None, reason: object) -> None:
        self.address, self.reason = address, reason
        super().__init__(f"cannot reach the Ray cluster at {address}: {reason}")


def import_ray(purpose: str) -> ModuleType:
    """``import ray``, or an ``ImportError`` naming the extra to install.

    :param purpose: what needs Ray, as the start of the message (e.g. ``"sweeps run"``)
    """
    try:
        import ray
    except ImportError:
        raise ImportError(f"{purpose} on Ray, which is not installed: {INSTALL_RAY}") from None
    return ray


def check_address(address: str | None) -> None:
    """A ``ValueError`` for an address that is not ``None``, ``"auto"``, ``HOST:PORT`` or ``ray://HOST:PORT``."""
    if address is None or address == "auto":
        return
    if not isinstance(address, str):
        raise ValueError(f"the Ray address must be None, 'auto', HOST:PORT or ray://HOST:PORT, got {address!r}")
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"the Ray address must be None, 'auto', HOST:PORT or ray://HOST:PORT, got {address!r}")


def connect(address: str | None, purpose: str = "this run") -> bool:
    """Start or join Ray; ``True`` when this call started it (the caller then calls ``ray.shutdown()``).

    A process already connected (``ray.init`` called before) keeps its connection (a ``HOST:PORT`` address
    is still checked for a listener).

    :raises ValueError: for a malformed address
    :raises UnreachableClusterError: when the cluster cannot be reached
    """
    ray = import_ray(f"{purpose} runs")
    check_address(address)
    if address not in (None, "auto"):
        host, _, port = address.removeprefix("ray://").rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=10).close()
        except OSError as error:
            raise UnreachableClusterError(address, error) from None
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False}
    if address is None:
        package_root = str(Path(__file__).resolve().parents[3])
        path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
        kwargs.update(include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
    handlers = _own_signal_handlers()
    try:  # "local": a new Ray, even where ``ray start`` left one to join
        ray.init(address=address or "local", **kwargs)
    except Exception as error:  # ConnectionError, TimeoutError, grpc errors, ...
        raise UnreachableClusterError(address, error) from error
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return True


def _own_signal_handlers() -> dict[int, Any]:
    """This process's SIGTERM and SIGINT handlers, to restore after ``ray.init``: Ray's core worker installs a
    crash handler for SIGTERM that aborts the process, where the caller (the zoo) saves the model on SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}
    return {number: handler for number, handler in handlers.items() if handler is not None}
