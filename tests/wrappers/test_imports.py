"""Importing the wrappers is light (no torch, SB3, ALE or MuJoCo) and changes nothing in the process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HEAVY = ("torch", "stable_baselines3", "ale_py", "mujoco", "dm_control", "shimmy")


def _python(code: str, *options: str, **environ: str) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key not in ("MUJOCO_GL", "DISPLAY")}
    return subprocess.run(
        [sys.executable, *options, "-c", code], env={**env, **environ}, capture_output=True, text=True, check=True
    )


@pytest.mark.parametrize("module", ["delayzoo.wrappers", "delayzoo.wrappers.delay", "delayzoo"])
def test_importing_the_wrappers_loads_no_torch_sb3_ale_or_mujoco(module):
    result = _python(f"import {module}", "-X", "importtime")
    loaded = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "gymnasium" in loaded and "delayzoo.wrappers.pending" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_lazy_names_load_on_first_use_and_mujoco_gl_is_left_alone():
    code = (
        "import os, sys, delayzoo, delayzoo.wrappers as w; "
        "print(os.environ.get('MUJOCO_GL'), 'torch' in sys.modules); "
        "print(w.make_atari.__module__, w.EpisodeMonitor.__module__, w.make_dmc.__module__, delayzoo.PWM.__name__); "
        "print(os.environ.get('MUJOCO_GL'), sorted(set(w.__all__) - set(dir(w))))"
    )
    lines = _python(code).stdout.splitlines()
    assert lines[0] == "None False"
    assert lines[1] == "delayzoo.wrappers.atari delayzoo.wrappers.monitor delayzoo.wrappers.dmc PWM"
    assert lines[2] == "None []"


def test_make_dmc_sets_mujoco_gl_only_when_the_user_has_not():
    code = "import os; from delayzoo.wrappers import make_dmc; make_dmc(); print(os.environ['MUJOCO_GL'])"
    assert _python(code).stdout.splitlines()[-1] == "egl"
    assert _python(code, MUJOCO_GL="glfw").stdout.splitlines()[-1] == "glfw"
