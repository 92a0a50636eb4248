"""Cost of the delay stack on top of a raw ALE step, measured side by side in one process.

Steps ALE Pong (v5 defaults: frameskip 4, sticky actions 0.25) raw, under ExecutionDelay, and under
ExecutionDelay + PendingActionsObservation, in interleaved rounds with the same pre-drawn actions,
and prints steps/s and the time ratio of each stack to the raw env (median over rounds).
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


def steps_per_second(env: gym.Env, actions: np.ndarray) -> float:
    env.reset(seed=0)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(int(action))
        if terminated or truncated:
            env.reset()
    return len(actions) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--max-delay", type=int, default=15)
    args = parser.parse_args()
    stacks = {
        "raw ALE": lambda: gym.make("ALE/Pong-v5"),
        "ExecutionDelay": lambda: ExecutionDelay(gym.make("ALE/Pong-v5"), RandomWalkDelay(args.max_delay)),
        "ExecutionDelay+Pending": lambda: PendingActionsObservation(
            ExecutionDelay(gym.make("ALE/Pong-v5"), RandomWalkDelay(args.max_delay))
        ),
    }
    envs = {name: make() for name, make in stacks.items()}
    actions = np.random.default_rng(0).integers(0, 6, size=args.steps)
    rates: dict[str, list[float]] = {name: [] for name in stacks}
    ratios: dict[str, list[float]] = {name: [] for name in stacks}
    for _ in range(args.rounds):
        raw = steps_per_second(envs["raw ALE"], actions)
        rates["raw ALE"].append(raw)
        for name in list(stacks)[1:]:
            rate = steps_per_second(envs[name], actions)
            rates[name].append(rate)
            ratios[name].append(raw / rate)
    print(f"{args.rounds} rounds x {args.steps} steps, RandomWalkDelay(max_delay={args.max_delay}), medians:")
    for name in stacks:
        line = f"  {name:24s} {statistics.median(rates[name]):8.0f} steps/s"
        if ratios[name]:
            overhead = statistics.median(ratios[name]) - 1.0
            line += f"   time ratio to raw {statistics.median(ratios[name]):.3f} (overhead {100 * overhead:+.1f}%)"
        print(line)


if __name__ == "__main__":
    main()
