"""Cost of the delay stacks on top of a raw ALE step, measured side by side in one process.

Steps ALE Pong (v5 defaults: frameskip 4, sticky actions 0.25) raw and under the delay stacks: ExecutionDelay,
ExecutionDelay + PendingActionsObservation, ObservationDelay (which keeps a copy of every 210x160x3 frame it
holds back), ObservationDelay + PendingActionsObservation, and both delays with the view. Every decision is
NOOP, so the delayed stacks execute exactly the actions of the raw one and all emulate the same frames (the
queues' work does not depend on the action values): the difference is the wrappers' own cost. The stacks take
turns every ``--block`` steps (each block starting with the next stack), so a machine whose speed drifts slows
them alike; prints steps/s and the ratio
of each stack's wall and process CPU time to the raw env's (medians over rounds).
Run: ``python benchmarks/wrapper_overhead.py [--steps 2000] [--rounds 7] [--max-delay 15]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import ale_py
import gymnasium as gym
import numpy as np

from delayzoo.wrappers import ExecutionDelay, ObservationDelay, PendingActionsObservation, RandomWalkDelay

gym.register_envs(ale_py)


def timed_steps(env: gym.Env, actions: np.ndarray) -> tuple[float, float]:
    """Wall and process CPU seconds to step ``env`` through ``actions``, resetting when a game ends."""
    start, cpu = time.perf_counter(), time.process_time()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            env.reset()
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-delay", type=int, default=15)
    parser.add_argument("--block", type=int, default=100, help="steps each stack runs before the next takes its turn")
    args = parser.parse_args()
    def pong() -> gym.Env:
        return gym.make("ALE/Pong-v5")

    def walk() -> RandomWalkDelay:
        return RandomWalkDelay(args.max_delay)

    stacks = {
        "raw ALE": pong,
        "ExecutionDelay": lambda: ExecutionDelay(pong(), walk()),
        "ExecutionDelay+Pending": lambda: PendingActionsObservation(ExecutionDelay(pong(), walk())),
        "ObservationDelay": lambda: ObservationDelay(pong(), walk()),
        "ObservationDelay+Pending": lambda: PendingActionsObservation(ObservationDelay(pong(), walk())),
        "both delays+Pending": lambda: PendingActionsObservation(
            ObservationDelay(ExecutionDelay(pong(), walk()), walk())
        ),
    }
    envs = {name: make() for name, make in stacks.items()}
    for env in envs.values():
        env.reset(seed=0)
    actions = np.zeros(args.steps, dtype=np.int64)
    rates: dict[str, list[float]] = {name: [] for name in stacks}
    ratios: dict[str, list[float]] = {name: [] for name in stacks}
    cpu_ratios: dict[str, list[float]] = {name: [] for name in stacks}
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(args.rounds):
        seconds = dict.fromkeys(stacks, 0.0)
        cpu_seconds = dict.fromkeys(stacks, 0.0)
        names = list(envs)
        for index, block in enumerate(np.array_split(actions, max(args.steps // args.block, 1))):
            # the stacks take turns every block, so drift hits all alike, each block starting with the next
            # stack, so that none always runs first (or right after the costliest)
            for name in names[index % len(names):] + names[: index % len(names)]:
                block_wall, block_cpu = timed_steps(envs[name], block)
                seconds[name] += block_wall
                cpu_seconds[name] += block_cpu
        for name in stacks:
            rates[name].append(args.steps / seconds[name])
            ratios[name].append(seconds[name] / seconds["raw ALE"])
            cpu_ratios[name].append(cpu_seconds[name] / cpu_seconds["raw ALE"])
    print(f"{args.rounds} rounds x {args.steps} steps, RandomWalkDelay(max_delay={args.max_delay}), medians "
          f"({time.perf_counter() - wall:.0f} s wall, {time.process_time() - cpu:.0f} s CPU, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}):")
    for name in stacks:
        line = f"  {name:26s} {statistics.median(rates[name]):8.0f} steps/s"
        if name != "raw ALE":
            wall_ratio, cpu_ratio = statistics.median(ratios[name]), statistics.median(cpu_ratios[name])
            line += f"   ratio to raw: wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f} ({100 * (cpu_ratio - 1):+.1f}% CPU)"
        print(line)


if __name__ == "__main__":
    main()
