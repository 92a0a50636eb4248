"""Hyperparameter studies through the zoo: each run is one ``train`` and one ``eval`` command, as a benchmark cell.

A run trains one algorithm on one env with its zoo entry and the given ``-params`` overrides, saving a
checkpoint every ``--save-freq`` steps, then evaluates every checkpoint (16 deterministic episodes by default),
exactly as :mod:`delayzoo.zoo.study` runs a delay-benchmark cell at delay 0, so its returns compare with the
benchmark's. Each run appends one JSON line to ``--json``: its label, seed, overrides, the commit the code ran
at, the curve (mean return per checkpoint), the return at the last checkpoint and the "final" return (the mean
of the last 3 checkpoints, as on the benchmark pages), the per-episode returns, and the process CPU seconds of
both commands with the load average. ``--table FILE`` prints a file's runs side by side and exits.

    python benchmarks/entry_study.py --algo pwm --env MinAtar/Breakout-v1 --label conv-bce --seeds 100 \\
        --save-freq 10000 --json docs/results/pwm-minatar-study/MinAtar-Breakout-v1.jsonl \\
        -params "policy_kwargs:dict(world_model_kwargs=dict(frames='conv'))"

The run folders go to ``-f`` (default ``runs/entry-study``, not committed); one torch thread per run.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import pathlib
import resource
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from delayzoo.version import source_commit

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAST = 3


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(argv: list[str]) -> float:
    """Run a zoo command with one thread and return its process CPU seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    before = _children_cpu()
    subprocess.run([sys.executable, "-m", *argv], check=True, env=env, cwd=ROOT)
    return round(_children_cpu() - before, 1)


def read_curve(path: pathlib.Path) -> tuple[list[tuple[int, float]], dict[str, list[float]]]:
    """An eval CSV's mean return per checkpoint and the episodes' returns, keyed by step."""
    with path.open(newline="") as file:
        rows = list(csv.reader(file))[1:]
    episodes = {row[0]: [float(value) for value in row[1:]] for row in rows}
    return [(int(step), float(np.mean(values))) for step, values in episodes.items()], episodes


def run(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Train and evaluate one run; return its JSON record."""
    folder = args.log_folder / f"{args.label}_seed{seed}"
    wall = time.perf_counter()
    train = ["delayzoo.zoo.train", "--algo", args.algo, "--env", args.env, "--seed", str(seed), "-f", str(folder),
             "--eval-freq", "-1", "--save-freq", str(args.save_freq), "--num-threads", "1", *args.train_args]
    if args.n_timesteps:
        train += ["-n", str(args.n_timesteps)]
    if args.params:
        train += ["-params", *args.params]
    output = folder / "eval.csv"
    train_cpu = _run(train)
    eval_cpu = _run(["delayzoo.zoo.eval", "--algo", args.algo, "--env", args.env, "-f", str(folder), "-n",
                     str(args.episodes), "--device", "cpu", "-o", str(output), *args.eval_args])
    curve, episodes = read_curve(output)
    return {
        "label": args.label,
        "algo": args.algo,
        "env": args.env,
        "seed": seed,
        "params": args.params,
        "train_args": args.train_args,
        "commit": source_commit(),
        "curve": curve,
        "last": curve[-1][1],
        "final": float(np.mean([value for _, value in curve[-LAST:]])),
        "episodes": episodes,
        "cpu_s": {"train": train_cpu, "eval": eval_cpu},
        "wall_s": round(time.perf_counter() - wall, 1),
        "threads": 1,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def table(records: Sequence[dict[str, Any]]) -> str:
    """Per label: each seed's return at the last checkpoint and final return, the means, the minimum and CPU-min."""
    lines = ["| label | seed: last / final | mean last | mean final | min final | CPU-min per run |",
             "|---|---|---|---|---|---|"]
    labels: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        labels.setdefault(record["label"], []).append(record)
    for label, runs in labels.items():
        runs = sorted(runs, key=lambda r: r["seed"])
        seeds = ", ".join(f"{r['seed']}: {r['last']:.2f} / {r['final']:.2f}" for r in runs)
        cpu = np.median([(r["cpu_s"]["train"] + r["cpu_s"]["eval"]) / 60 for r in runs])
        last, final = np.mean([r["last"] for r in runs]), np.mean([r["final"] for r in runs])
        worst = min(r["final"] for r in runs)
        lines.append(f"| {label} | {seeds} | {last:.2f} | {final:.2f} | {worst:.2f} | {cpu:.1f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="pwm")
    parser.add_argument("--env", default="MinAtar/Breakout-v1")
    parser.add_argument("--label", default="entry", help="the run's name in the JSON lines and the table")
    parser.add_argument("--seeds", nargs="+", type=int, default=[100])
    parser.add_argument("-n", "--n-timesteps", type=int, default=None, help="env steps (default: the entry's)")
    parser.add_argument("--save-freq", type=int, default=10_000, help="steps between checkpoints")
    parser.add_argument("--episodes", type=int, default=16, help="evaluation episodes per checkpoint")
    parser.add_argument("-f", "--log-folder", type=pathlib.Path, default=ROOT / "runs" / "entry-study")
    parser.add_argument("--train-args", nargs="*", action="extend", type=shlex.split, default=[],
                        help='more train flags, quoted: --train-args "--preset benchmark"')
    parser.add_argument("--eval-args", nargs="*", action="extend", type=shlex.split, default=[],
                        help='more eval flags, quoted: --eval-args "--n-envs 8"')
    parser.add_argument("--json", type=pathlib.Path, help="append one JSON line per run to this file")
    parser.add_argument("--table", type=pathlib.Path, help="print the runs of a --json file and exit")
    parser.add_argument("-params", nargs="*", default=[], help="hyperparameter overrides, as the zoo's train takes")
    args = parser.parse_args(argv)
    args.train_args = [token for tokens in args.train_args for token in tokens]
    args.eval_args = [token for tokens in args.eval_args for token in tokens]
    if args.table:
        print(table([json.loads(line) for line in args.table.read_text().splitlines() if line.strip()]))
        return
    records = []
    for seed in args.seeds:
        record = run(args, seed)
        records.append(record)
        print(f"{args.label} seed {seed}: last {record['last']:.2f}, final {record['final']:.2f}, "
              f"{sum(record['cpu_s'].values()) / 60:.1f} CPU-min", flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            with args.json.open("a") as file:
                file.write(json.dumps(record) + "\n")
    print(table(records))


if __name__ == "__main__":
    main()
