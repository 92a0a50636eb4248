"""The package version, and the git commit of a source checkout (what a study records beside its results)."""

from __future__ import annotations

import pathlib
import subprocess

__version__ = "0.1.0"


def source_commit() -> str:
    """The git commit of the checkout this package is imported from, with ``+dirty`` when tracked files differ
    from it, so that a result records the code it ran; ``"unknown"`` for an installed wheel or without git."""
    root = pathlib.Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True)
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True, text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head.stdout.strip() + ("+dirty" if status.stdout.strip() else "")
