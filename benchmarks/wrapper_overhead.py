"""Cost of the delay stack on top of a raw ALE step, measured side by side in one process.

Steps ALE Pong (v5 defaults: frameskip 4, sticky actions 0.25) raw, under ExecutionDelay, and under
ExecutionDelay + PendingActionsObservation. Every decision is NOOP, so the delayed stacks execute
exactly the actions of the raw one and all three emulate the same frames (the queue's work does not
depend on the action values): the difference is the wrappers' own cost. The three stacks take
turns every ``--block`` steps, so a machine whose speed drifts slows them alike; prints steps/s and
the time ratio of each stack to the raw env (median over rounds).
Run: ``python benchmarks/wrapper_overhead.py [--steps 2000] [--rounds 7] [--max-delay 15]``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import ale_py
import gymnasium as gym
import numpy as np

from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay

gym.register_envs(ale_py)


def timed_steps(env: gym.Env, actions: np.ndarray) -> float:
    """Seconds to step ``env`` through ``actions``, resetting when a game ends."""
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            env.reset()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-delay", type=int, default=15)
    parser.add_argument("--block", type=int, default=100, help="steps each stack runs before the next takes its turn")
    args = parser.parse_args()
    stacks = {
        "raw ALE": lambda: gym.make("ALE/Pong-v5"),
        "ExecutionDelay": lambda: ExecutionDelay(gym.make("ALE/Pong-v5"), RandomWalkDelay(args.max_delay)),
        "ExecutionDelay+Pending": lambda: PendingActionsObservation(
            ExecutionDelay(gym.make("ALE/Pong-v5"), RandomWalkDelay(args.max_delay))
        ),
    }
    envs = {name: make() for name, make in stacks.items()}
    for env in envs.values():
        env.reset(seed=0)
    actions = np.zeros(args.steps, dtype=np.int64)
    rates: dict[str, list[float]] = {name: [] for name in stacks}
    ratios: dict[str, list[float]] = {name: [] for name in stacks}
    for _ in range(args.rounds):
        seconds = dict.fromkeys(stacks, 0.0)
        for block in np.array_split(actions, max(args.steps // args.block, 1)):
            for name, env in envs.items():  # the stacks take turns every block, so drift hits all alike
                seconds[name] += timed_steps(env, block)
        for name in stacks:
            rates[name].append(args.steps / seconds[name])
            ratios[name].append(seconds[name] / seconds["raw ALE"])
    print(f"{args.rounds} rounds x {args.steps} steps, RandomWalkDelay(max_delay={args.max_delay}), medians:")
    for name in stacks:
        line = f"  {name:24s} {statistics.median(rates[name]):8.0f} steps/s"
        if name != "raw ALE":
            overhead = statistics.median(ratios[name]) - 1.0
            line += f"   time ratio to raw {statistics.median(ratios[name]):.3f} (overhead {100 * overhead:+.1f}%)"
        print(line)


if __name__ == "__main__":
    main()
