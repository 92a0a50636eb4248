"""The GPU check's dry run: the same parts on the CPU at tiny sizes, every figure in the one file it writes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_dry_run_writes_every_figure_or_says_why_the_ray_one_was_skipped(tmp_path):
    output = tmp_path / "gpu_check.json"
    result = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--dry-run", "-o", str(output)],
        cwd=REPO, env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["environment"]["torch"] and report["setup"]
    figures = report["figures"]
    assert set(figures) == {"pwm_step_s", "dez_update_s", "dez_acting_decisions_per_s", "dez_distributed_steps_per_s"}
    if "skipped" in figures["dez_distributed_steps_per_s"]:  # where import ray fails
        assert figures.pop("dez_distributed_steps_per_s")["skipped"].startswith("Ray is absent")
    for name, entry in figures.items():
        assert "error" not in entry, f"{name}: {entry['error']}"
        assert math.isfinite(entry["value"]) and entry["value"] > 0, (name, entry)
