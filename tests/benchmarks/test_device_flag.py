"""The benchmarks' ``--device`` refuses a CUDA device torch does not see, before anything runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["dez_acting", "dez_atari", "dez_throughput", "pwm_update", "scan_speed"])
def test_a_cuda_device_beyond_the_ones_torch_sees_exits_2_saying_how_to_choose_the_cpu(script):
    device = f"cuda:{torch.cuda.device_count()}"  # one past the last, on any machine
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / f"{script}.py"), "--device", device],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert f"error: argument --device: --device {device} asks for a CUDA GPU" in result.stderr
    assert result.stderr.strip().endswith("choose the CPU with --device cpu")
