import pathlib
import subprocess

import pytest

import delayzoo
from delayzoo.version import source_commit


def test_source_commit_names_the_checkout_head():
    root = pathlib.Path(delayzoo.__file__).resolve().parents[1]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout")
    assert source_commit().removesuffix("+dirty") == head.stdout.strip()


def test_source_commit_is_unknown_outside_git(monkeypatch):
    def no_git(*args, **kwargs):
        raise OSError("git not found")

    monkeypatch.setattr(subprocess, "run", no_git)
    assert source_commit() == "unknown"
