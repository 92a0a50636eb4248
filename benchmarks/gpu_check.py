"""The figures of ``benchmarks/gpu_check.sh``, written to one JSON file.

Each part runs one benchmark script in a fresh process under a time limit and reads the JSON line it ends
with: a part that fails or runs past its limit records its error, and the next part runs. The file is
rewritten after every part, so a check stopped midway still leaves what it measured. The Ray figure runs
only where ``import ray`` works; elsewhere the file says it was skipped. ``--dry-run`` runs the same parts
on the CPU at tiny sizes. Run it through ``gpu_check.sh``, which installs what is missing and builds the
tree first.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

ENVIRONMENT = """
import importlib.metadata, json, platform, torch
import delayzoo.ctree
def version(name):
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None
cuda = torch.cuda.is_available()
print(json.dumps({
    "device": torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine(),
    "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda if cuda else None,
    **{name: version(name) for name in ("numpy", "gymnasium", "stable-baselines3", "ale-py", "ray")},
    "ctree_compiled": delayzoo.ctree.HAS_CTREE,
}))
"""
"""Prints the device, the versions and whether the compiled tree loads, as one JSON line."""


def _pwm_step(steps: list[dict[str, list[float]]]) -> tuple[float, dict[str, float]]:
    """The median wall seconds of a whole step (the sum of its parts) and of each part."""
    parts = {part: statistics.median(step[part][0] for step in steps) for part in steps[0]}
    return statistics.median(sum(wall for wall, _ in step.values()) for step in steps), parts


def _key(name: str) -> Callable[[dict[str, float]], tuple[float, dict[str, float]]]:
    """A reader that takes the figure ``name`` of a benchmark's JSON line and keeps the others beside it."""
    return lambda figures: (figures[name], figures)


@dataclass(frozen=True)
class Part:
    """One figure: a benchmark script, its arguments on the GPU and in the dry run, and how to read it."""

    name: str
    what: str
    script: str
    gpu_args: tuple[str, ...]
    dry_args: tuple[str, ...]
    limit_s: float
    """Seconds it may run on the GPU (the dry run allows each part ``DRY_LIMIT_S``)."""
    read: Callable[[Any], tuple[float, dict[str, float]]]
    needs_ray: bool = False


DRY_LIMIT_S = 120.0

PARTS = (
    Part(
        "pwm_step_s",
        "PWM training step at the paper's Atari size (64x64x3 frames, batch 16 x 64, 1024 imagination starts), "
        "s wall with CUDA synchronised, median of 5 steps",
        "pwm_update.py",
        ("--device", "cuda", "--updates", "5", "--json"),
        ("--device", "cpu", "--size", "cartpole", "--batch-size", "2", "--sequence-length", "8", "--fill", "20",
         "--updates", "1", "--json"),
        90,
        _pwm_step,
    ),
    Part(
        "dez_update_s",
        "DelayedEZ update at Atari size (batch 256, 5 unroll steps, 50 simulations, reanalyze_ratio 0.99) on "
        "random 96x96 frames, s wall with CUDA synchronised, mean of 3 updates",
        "dez_atari.py",
        ("--device", "cuda", "--updates", "3", "--json"),
        ("--device", "cpu", "--envs", "2", "--fill", "320", "--batch-size", "4", "--simulations", "2",
         "--updates", "1", "--json"),
        150,
        _key("update_s"),
    ),
    Part(
        "dez_acting_decisions_per_s",
        "DelayedEZ batched acting (8 envs, 50 simulations, the Atari network), env decisions/s",
        "dez_acting.py",
        ("--device", "cuda", "--decisions", "20", "--json"),
        ("--device", "cpu", "--envs", "2", "--simulations", "2", "--decisions", "2", "--json"),
        60,
        _key("decisions_per_s"),
    ),
    Part(
        "dez_distributed_steps_per_s",
        "DelayedEZ on Ray actors (the zoo's CartPole-v1 settings, 2 self-play and 1 reanalysis actors), "
        "env steps/s wall in steady state",
        "dez_throughput.py",
        ("--child", "--self-play-actors", "2", "--reanalysis-actors", "1", "--steps", "2000"),
        ("--child", "--self-play-actors", "1", "--reanalysis-actors", "1", "--steps", "16"),
        150,
        _key("steps_per_wall_s"),
        needs_ray=True,
    ),
)


def run(command: list[str], limit_s: float) -> tuple[int | None, str]:
    """``(exit status, output)`` of ``command``; the status is ``None`` when it ran past ``limit_s`` and was
    killed, with every process it started in its session."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    process = subprocess.Popen(
        command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )
    try:
        output = process.communicate(timeout=limit_s)[0]
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        try:
            return None, process.communicate(timeout=10)[0]
        except subprocess.TimeoutExpired:  # a process outside its session still holds the output open
            return None, ""
    return process.returncode, output


def measure(part: Part, dry_run: bool) -> dict[str, Any]:
    """The part's entry in the file: its figure (``value``), ``skipped`` or ``error``, and how it ran."""
    entry: dict[str, Any] = {"what": ("dry run, at the tiny sizes of its command, of: " if dry_run else "") + part.what}
    if part.needs_ray:
        status, output = run([sys.executable, "-c", "import ray"], 60)
        if status != 0:
            last = (output.strip().splitlines() or ["no output"])[-1]
            entry["skipped"] = f"Ray is absent: import ray failed ({last})"
            return entry
    limit_s = DRY_LIMIT_S if dry_run else part.limit_s
    command = [sys.executable, f"benchmarks/{part.script}", *(part.dry_args if dry_run else part.gpu_args)]
    entry["command"] = " ".join(["python", *command[1:]])
    began = time.perf_counter()
    status, output = run(command, limit_s)
    entry["wall_s"] = round(time.perf_counter() - began, 1)
    if status is None:
        entry["error"] = f"ran past its limit of {limit_s:.0f} s; its last output: {output[-1500:]}"
        return entry
    try:
        if status:
            raise RuntimeError(f"exit status {status}")
        entry["value"], entry["details"] = part.read(json.loads(output.strip().splitlines()[-1]))
    except (RuntimeError, ValueError, LookupError) as error:
        entry["error"] = f"{error}; its last output: {output[-1500:]}"
    return entry


def environment() -> dict[str, Any]:
    """The device, the versions, whether the compiled tree loads, and the git commit (when there is one)."""
    status, output = run([sys.executable, "-c", ENVIRONMENT], 60)
    found = json.loads(output.strip().splitlines()[-1]) if status == 0 else {"error": output[-1500:]}
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return {**found, "commit": commit.stdout.strip() if commit.returncode == 0 else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--output", type=Path, required=True, help="the JSON file written")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU at tiny sizes")
    parser.add_argument("--setup", action="append", default=[], help="a line of gpu_check.sh's set-up to record")
    args = parser.parse_args()
    report: dict[str, Any] = {
        "check": "benchmarks/gpu_check.sh" + (" --dry-run (CPU, tiny sizes)" if args.dry_run else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "setup": args.setup,
        "environment": environment(),
        "figures": {},
    }
    print(json.dumps(report["environment"]), flush=True)
    for part in PARTS:
        if args.dry_run or report["environment"].get("cuda"):
            entry = measure(part, args.dry_run)
        else:  # SB3 would put the models on the CPU, where the GPU sizes run past their limits
            entry = {"what": part.what, "skipped": "torch sees no CUDA device (use --dry-run on a CPU)"}
        report["figures"][part.name] = entry
        shown = {key: entry[key] for key in ("value", "skipped", "error", "wall_s") if key in entry}
        print(f"{part.name}: {shown}", flush=True)
        args.output.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
