"""Updates per second of PWM: one world-model update plus one imagination actor-critic update.

The default is the paper's Atari size (64x64x3 frames, batch 16 x 64, 32x32 latents, 2 cells of
width 512, 1024 imagination starts, horizon 15). ``--scan`` picks the window pass's method, so the
parallel scan and the loop can be compared side by side (``--scan both``).

    python benchmarks/pwm_update.py                          # paper size, scan=auto
    python benchmarks/pwm_update.py --scan both --updates 3
    python benchmarks/pwm_update.py --size cartpole --env CartPole-v1 --sequence-length 16
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from delayzoo.agents.pwm import PWM

CARTPOLE_SIZE = dict(  # the CartPole-v1 model of hyperparams/pwm.yml
    world_model_kwargs=dict(stoch=8, classes=8, mlp_units=64, seq_width=64, seq_cells=1, seq_divisor=2),
    actor_critic_kwargs=dict(units=64),
)


class RandomImageEnv(gym.Env):
    """Random 64x64 RGB frames and 6 actions: Atari-sized inputs without the emulator."""

    observation_space = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)
    action_space = gym.spaces.Discrete(6)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), float(self.np_random.random() < 0.05), False, False, {}


def measure(args: argparse.Namespace, scan: str) -> list[float]:
    env = RandomImageEnv() if args.env == "image" else gym.make(args.env)
    policy_kwargs = dict(CARTPOLE_SIZE) if args.size == "cartpole" else {}
    policy_kwargs["scan_method"] = scan
    model = PWM(
        "CnnPolicy" if args.env == "image" else "MlpPolicy",
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
    model.learning_starts = 0
    times = []
    for _ in range(args.updates + 1):
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        model.train(gradient_steps=1, batch_size=args.batch_size)
        if model.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return times[1:]  # the first update pays for allocations and kernel selection


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="image", help='"image" (random 64x64 frames) or a gymnasium id')
    parser.add_argument("--size", choices=["paper", "cartpole"], default="paper")
    parser.add_argument("--scan", choices=["auto", "parallel", "sequential", "both"], default="auto")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--sequence-length", type=int, default=64)
    parser.add_argument("--fill", type=int, default=200, help="random steps stored before timing")
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    scans = ["parallel", "sequential"] if args.scan == "both" else [args.scan]
    batch = f"{args.batch_size}x{args.sequence_length}"
    print(f"env={args.env} size={args.size} batch={batch} threads={torch.get_num_threads()}")
    medians = {}
    for scan in scans:
        times = measure(args, scan)
        medians[scan] = statistics.median(times)
        print(
            f"scan={scan:<10} median {medians[scan]:.3f} s/update = {1 / medians[scan]:.2f} updates/s  (runs: "
            + ", ".join(f"{t:.3f}" for t in times)
            + ")",
            flush=True,
        )
    if len(medians) == 2:
        print(f"sequential/parallel time ratio: {medians['sequential'] / medians['parallel']:.2f}")


if __name__ == "__main__":
    main()
