"""Seconds per PWM training step, split into its parts, in wall-clock AND process CPU time.

One step is ``PWM.train(gradient_steps=1)``: the world-model update (replay sampling included), the
imagination rollout, and the actor-critic update (``PWM.last_update_times`` measures each). CPU time
(all threads of the process) next to wall time keeps a busy machine from making the figures lie: when
other jobs compete, wall time grows and CPU time does not. The load average is printed with them.

The default is the paper's Atari size (64x64x3 frames, batch 16 x 64, 32x32 latents, 2 cells of
width 512, 1024 imagination starts, horizon 15) on 1 torch thread. ``--scan`` picks the window pass's
method (``--scan both``: the parallel scan and the loop side by side).

    python benchmarks/pwm_update.py                          # paper size, scan=auto, 1 thread
    python benchmarks/pwm_update.py --scan both --updates 3 --threads 2
    python benchmarks/pwm_update.py --mixed-precision         # bfloat16 autocast
    python benchmarks/pwm_update.py --size cartpole --env CartPole-v1 --sequence-length 16

``--size cartpole`` is the model of ``CartPole-v1@benchmark`` (the delay benchmark's PWM) and ``--size
minatar`` that of ``MinAtar/Breakout-v1``, read from ``delayzoo/hyperparams/pwm.yml``, each on its env; with
``--delay N`` the env is CartPole under a random-walk delay of maximum N with the pending view, PWM in
forecast mode, and the part ``acting`` is one greedy ``predict`` (the evaluation's: the mean of
``forecast_samples`` sampled forecasts). ``--baseline REV`` measures the ``delayzoo`` package of git
revision REV beside the working tree's, alternating the two in fresh processes for ``--rounds`` rounds,
and prints the medians over all rounds side by side (the CPU cost of one update, before and after)::

    python benchmarks/pwm_update.py --size cartpole --env CartPole-v1 --sequence-length 16 --delay 5 \
        --updates 20 --rounds 5 --baseline main

``--compile on`` measures the policy's ``compile_update`` (the baseline of ``--baseline`` runs plain);
``--compile both`` runs the plain and the compiled update side by side in one process, alternating
update by update, and prints each one's first update (the compilation) and the medians::

    python benchmarks/pwm_update.py --size minatar --sequence-length 16 --updates 60 --compile both
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

import gymnasium as gym
import numpy as np
import torch
import yaml

from delayzoo.agents.pwm import PWM
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay
from delayzoo.wrappers.minatar import is_minatar_id, make_minatar
from delayzoo.zoo.trust import parse_kwargs

try:
    from delayzoo.agents.common.checks import device_argument
except ImportError:  # a --baseline revision older than the check (its children get a device checked here)
    device_argument = str

REPO = pathlib.Path(__file__).resolve().parents[1]

SIZE_ENTRIES = {"cartpole": "CartPole-v1@benchmark", "minatar": "MinAtar/Breakout-v1"}
"""The entries of this tree's ``delayzoo/hyperparams/pwm.yml`` whose model ``--size`` names."""

SIZE_ENVS = {"cartpole": "CartPole-v1", "minatar": "MinAtar/Breakout-v1"}


def model_size(size: str) -> dict:
    """The ``world_model_kwargs`` and ``actor_critic_kwargs`` of ``--size`` (empty: the paper's model)."""
    if size == "paper":
        return {}
    with open(REPO / "delayzoo" / "hyperparams" / "pwm.yml") as file:
        entry = yaml.safe_load(file)[SIZE_ENTRIES[size]]
    kwargs = parse_kwargs(entry["policy_kwargs"], f"pwm.yml {SIZE_ENTRIES[size]}")
    return {key: kwargs[key] for key in ("world_model_kwargs", "actor_critic_kwargs") if key in kwargs}


class RandomImageEnv(gym.Env):
    """Random 64x64 RGB frames and 6 actions: Atari-sized inputs without the emulator."""

    observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), float(self.np_random.random() < 0.05), False, False, {}


PARTS = ("world_model", "imagination", "actor_critic")


def make_env(args: argparse.Namespace) -> gym.Env:
    if args.env == "image":
        return RandomImageEnv()
    env = make_minatar(args.env, monitor=False) if is_minatar_id(args.env) else gym.make(args.env)
    if args.delay:
        env = PendingActionsObservation(ExecutionDelay(env, RandomWalkDelay(args.delay), init_action="random"))
    return env


def time_acting(model: PWM, env: gym.Env, steps: int) -> list[tuple[float, float]]:
    """``(wall, cpu)`` of ``steps`` greedy ``predict`` calls along an episode (env steps not counted)."""
    times = []
    obs, _ = env.reset(seed=0)
    state, start = None, np.ones(1, dtype=bool)
    for _ in range(steps + 1):
        began = (time.perf_counter(), time.process_time())
        action, state = model.predict(obs, state, start, deterministic=True)
        times.append((time.perf_counter() - began[0], time.process_time() - began[1]))
        obs, _, terminated, truncated, _ = env.step(action)
        start = np.array([terminated or truncated])
        if terminated or truncated:
            obs, _ = env.reset()
    return times[1:]


def build(args: argparse.Namespace, scan: str, compile_update: bool) -> PWM:
    """A PWM of ``--size`` whose replay holds ``--fill`` random steps (no update yet)."""
    env = make_env(args)
    policy_kwargs = model_size(args.size)
    policy_kwargs["scan_method"] = scan
    policy_kwargs["mixed_precision"] = args.mixed_precision
    if compile_update:  # only then: a --baseline revision older than the option does not know it
        policy_kwargs["compile_update"] = True
    policy = "CnnPolicy" if args.env == "image" else "MultiInputPolicy" if args.delay else "MlpPolicy"
    model = PWM(
        policy,
        env,
        buffer_size=args.fill + 10,
        learning_starts=args.fill,
        batch_size=args.batch_size,
        sequence_length=args.sequence_length,
        policy_kwargs=policy_kwargs,
        device=args.device,
        seed=0,
    )
    model.learn(args.fill)  # random steps only: fills the buffer, no update yet
    return model


def first_update(model: PWM, args: argparse.Namespace) -> tuple[float, float]:
    """``(wall, cpu)`` of the first update, which pays for allocations, kernel selection and compilation."""
    began = (time.perf_counter(), time.process_time())
    model.train(gradient_steps=1, batch_size=args.batch_size)
    return time.perf_counter() - began[0], time.process_time() - began[1]


def measure(args: argparse.Namespace, scan: str, compile_update: bool = False) -> list[dict[str, tuple[float, float]]]:
    """``args.updates`` timed training steps (after one untimed), each ``{part: (wall, cpu)}``, the
    ``acting`` part with ``--delay``."""
    model = build(args, scan, compile_update)
    first_update(model, args)
    times = []
    for _ in range(args.updates):
        model.train(gradient_steps=1, batch_size=args.batch_size)
        times.append(dict(model.last_update_times))
    if args.delay:
        for step, acting in zip(times, time_acting(model, make_env(args), len(times))):
            step["acting"] = acting
    return times


def compare_compiled(args: argparse.Namespace, scan: str) -> None:
    """The compiled update against the plain one in one process, alternating update by update."""
    models = {"plain": build(args, scan, False), "compiled": build(args, scan, True)}
    for name, model in models.items():
        wall, cpu = first_update(model, args)
        print(
            f"  first update, {name}: {wall:.1f} s wall / {cpu:.1f} s process CPU (compilation: "
            f"{model.policy.update_passes.compile_seconds:.1f} s wall)",
            flush=True,
        )
    if not models["compiled"].policy.update_passes.compiled:
        print("  compilation is not available here: both run plain")
    times: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in models}
    for update in range(args.updates):
        for name in sorted(models, reverse=update % 2 == 1):  # alternate which goes first
            models[name].train(gradient_steps=1, batch_size=args.batch_size)
            times[name].append(dict(models[name].last_update_times))
    print(f"  medians of {args.updates} updates each, alternating, process CPU seconds (wall in brackets)")
    print_side_by_side(times["plain"], times["compiled"], "plain", "compiled")


def print_side_by_side(before: list[dict], after: list[dict], before_name: str, after_name: str) -> None:
    """Each part's median CPU (wall) seconds before and after, and the CPU ratio after / before."""
    print(f"  {'part':<13} {before_name:>22} {after_name:>22} {'CPU ratio':>10}")
    for part in _parts(after):
        old = [_median(before, part, index) for index in (1, 0)]
        new = [_median(after, part, index) for index in (1, 0)]
        print(f"  {part:<13} {old[0]:10.4f} ({old[1]:8.4f}) {new[0]:10.4f} ({new[1]:8.4f}) {new[0] / old[0]:10.2f}")


def _median(times: list[dict[str, tuple[float, float]]], part: str, index: int) -> float:
    if part == "total":
        return statistics.median(sum(step[name][index] for name in PARTS) for step in times)
    return statistics.median(step[part][index] for step in times)


def _parts(times: list[dict[str, tuple[float, float]]]) -> tuple[str, ...]:
    return (*PARTS, "total", *(("acting",) if "acting" in times[0] else ()))


def export_revision(revision: str, into: str) -> str:
    """The ``delayzoo`` package of git ``revision`` unpacked under ``into`` (a ``PYTHONPATH`` entry)."""
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision, "delayzoo"], check=True, capture_output=True
    ).stdout
    with tempfile.TemporaryFile() as file:
        file.write(archive)
        file.seek(0)
        with tarfile.open(fileobj=file) as tar:
            tar.extractall(into, filter="data")
    return into


def compare(args: argparse.Namespace, argv: list[str]) -> None:
    """Alternate this tree and ``--baseline`` in fresh processes; medians over every round's steps."""
    if args.compile == "both":
        raise SystemExit("--baseline measures one version of this tree: --compile on or off")
    child = [arg for arg in argv if arg != "--baseline" and arg != args.baseline] + ["--json"]
    # The baseline runs plain (a revision older than compile_update does not know it).
    children = {"baseline": ["--compile", "off"], "this tree": []}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {"baseline": export_revision(args.baseline, tmp), "this tree": str(REPO)}
        times: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in paths}
        for round_ in range(args.rounds):
            for name in sorted(paths, reverse=round_ % 2 == 1):  # alternate which goes first
                env = {**os.environ, "PYTHONPATH": paths[name]}
                out = subprocess.run(
                    [sys.executable, __file__, *child, *children[name]],
                    env=env,
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout
                times[name].extend(json.loads(out.strip().splitlines()[-1]))
            print(f"round {round_ + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.2f}", flush=True)
    print(f"medians of {len(times['this tree'])} steps per version, process CPU seconds (wall in brackets)")
    print_side_by_side(times["baseline"], times["this tree"], "baseline " + args.baseline, "this tree")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--env", help='"image" (random 64x64 frames) or a gymnasium or MinAtar id (default: the --size\'s env)'
    )
    parser.add_argument("--size", choices=["paper", *SIZE_ENTRIES], default="paper")
    parser.add_argument(
        "--compile",
        choices=["off", "on", "both"],
        default="off",
        help="compile_update; both: plain and compiled side by side in one process",
    )
    parser.add_argument("--scan", choices=["auto", "parallel", "sequential", "both"], default="auto")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--fill", type=int, default=200, help="random steps stored before timing")
    parser.add_argument("--updates", type=int, default=3, help="timed training steps (after one untimed)")
    parser.add_argument("--device", type=device_argument, default="auto")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--mixed-precision", action="store_true", help="bfloat16 autocast (policy mixed_precision)")
    parser.add_argument("--delay", type=int, default=0, help="random-walk maximum delay, forecast mode (0: none)")
    parser.add_argument("--baseline", help="git revision measured beside this tree, alternating (see above)")
    parser.add_argument("--rounds", type=int, default=3, help="alternations with --baseline")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.env is None:
        args.env = SIZE_ENVS.get(args.size, "image")
    torch.set_num_threads(args.threads)
    if args.baseline:
        print(f"threads={args.threads} load average before: {os.getloadavg()[0]:.2f}", flush=True)
        compare(args, sys.argv[1:])
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        return
    if args.json:
        print(json.dumps(measure(args, args.scan, args.compile == "on")))
        return
    scans = ["parallel", "sequential"] if args.scan == "both" else [args.scan]
    print(
        f"env={args.env} size={args.size} batch={args.batch_size}x{args.sequence_length} "
        f"threads={torch.get_num_threads()} mixed_precision={args.mixed_precision} "
        f"load average before: {os.getloadavg()[0]:.2f}"
    )
    if args.compile == "both":
        for scan in scans:
            print(f"scan={scan}:")
            compare_compiled(args, scan)
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        return
    totals = {}
    for scan in scans:
        times = measure(args, scan, args.compile == "on")
        print(f"scan={scan}: medians of {len(times)} steps, seconds (wall / process CPU)")
        for part in _parts(times):
            wall, cpu = _median(times, part, 0), _median(times, part, 1)
            print(f"  {part:<13} {wall:8.3f} / {cpu:8.3f}")
        totals[scan] = (_median(times, "total", 0), _median(times, "total", 1))
        print(f"  load average after: {os.getloadavg()[0]:.2f}", flush=True)
    if len(totals) == 2:
        print(
            "sequential/parallel total: wall {:.2f}, CPU {:.2f}".format(
                totals["sequential"][0] / totals["parallel"][0], totals["sequential"][1] / totals["parallel"][1]
            )
        )


if __name__ == "__main__":
    main()
