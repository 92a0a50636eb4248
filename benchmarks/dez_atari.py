"""DelayedEZ at Atari size: seconds per update, and where they go.

Builds DelayedEZ from the ``atari`` entry of ``delayzoo/hyperparams/delayed_ez.yml`` (EfficientZero's conv
network, 50 simulations, batch 256, 5 unroll steps, reanalyze_ratio 0.99) on stand-in Atari frames:
random 96x96 RGB pixels stacked 4 by :class:`~delayzoo.wrappers.atari.FrameStack`, episodes of 50-150
steps, under ``RandomWalkDelay(5, p=0.2)`` with the pending view (``MultiInputPolicy``). The pixels do not
change the amount of work, so no ROM is needed. It fills the replay with ``--fill`` env steps from
``--envs`` envs (the acting rate is printed too), then times ``--updates`` single updates (prefetch off),
split into reanalysis (value bootstrap and the reanalysis search of ~1.5k roots with the target network),
targets (replay sampling) and the rest (unrolled loss, backward, optimiser, priorities).

Run: ``python benchmarks/dez_atari.py --device cuda``. On one CPU thread an update took 44 s of CPU time
(89 s wall, load average 4; reanalysis 63 s of it): use ``--updates 1`` there.
Decisions per second of the acting search alone: ``benchmarks/dez_acting.py``. ``--json`` ends the output
with the figures as one JSON line (``benchmarks/gpu_check.sh`` reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import gymnasium as gym
import numpy as np
import torch
import yaml
from gymnasium import spaces
from stable_baselines3.common.vec_env import DummyVecEnv

from delayzoo import DelayedEZ
from delayzoo.agents.common.checks import device_argument
from delayzoo.agents.delayed_ez.reanalysis import Reanalysis
from delayzoo.wrappers import ExecutionDelay, PendingActionsObservation, RandomWalkDelay
from delayzoo.wrappers.atari import FrameStack

HYPERPARAMS = os.path.join(os.path.dirname(__file__), "..", "delayzoo", "hyperparams", "delayed_ez.yml")
ZOO_ONLY = ("n_timesteps", "policy", "env_kwargs", "frame_stack")


class RandomFrames(gym.Env):
    """96x96 RGB frames of random pixels, 18 actions, sign rewards, episodes of 50-150 steps."""

    observation_space = spaces.Box(0, 255, (96, 96, 3), dtype=np.uint8)
    action_space = spaces.Discrete(18)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(50, 150))
        return self.observation_space.sample(), {}

    def step(self, action):
        self._left -= 1
        reward = float(self.np_random.integers(-1, 2))
        return self.observation_space.sample(), reward, self._left == 0, False, {}


def make_env() -> gym.Env:
    return PendingActionsObservation(ExecutionDelay(FrameStack(RandomFrames(), 4), RandomWalkDelay(5, p=0.2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=device_argument, default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--envs", type=int, default=8, help="envs filling the replay (one batched search)")
    parser.add_argument("--fill", type=int, default=1600, help="env steps stored before the timed updates")
    parser.add_argument("--updates", type=int, default=10, help="timed updates (after one warm-up update)")
    parser.add_argument("--batch-size", type=int, help="override the entry's batch size (256), e.g. for a quick check")
    parser.add_argument("--simulations", type=int, help="override the entry's simulations (50)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="end with the figures as one JSON line")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    entry = dict(yaml.safe_load(open(HYPERPARAMS))["atari"])
    for key in ZOO_ONLY:
        entry.pop(key, None)
    entry.update(learning_starts=args.fill, final_updates=0, prefetch=False)
    if args.batch_size:
        entry["batch_size"] = args.batch_size
    if args.simulations:
        entry["num_simulations"] = args.simulations
    env = DummyVecEnv([make_env for _ in range(args.envs)])
    model = DelayedEZ("MultiInputPolicy", env, seed=args.seed, device=args.device, **entry)
    device = model.device

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    spent = {"acting": 0.0, "reanalysis": 0.0, "targets": 0.0}
    for owner, name, part in (
        (model.policy, "act", "acting"), (Reanalysis, "targets", "reanalysis"),
        (model.replay_buffer, "sample", "targets"),
    ):
        inner = getattr(owner, name)

        def wrapper(*a, _inner=inner, _part=part, **k):
            sync()
            start = time.perf_counter()
            try:
                return _inner(*a, **k)
            finally:
                sync()
                spent[_part] += time.perf_counter() - start

        setattr(owner, name, wrapper)
    with warnings.catch_warnings():  # SB3 warns that this run makes no update: the updates are timed below
        warnings.simplefilter("ignore", UserWarning)
        model.learn(args.fill)
    acting = spent["acting"]
    if len(model.replay_buffer) == 0:
        raise SystemExit(f"no episode ended in --fill {args.fill} steps of {args.envs} envs: raise --fill")
    model.train(1, model.batch_size)  # warm-up: allocations, cuDNN's algorithm choice
    for part in ("reanalysis", "targets"):
        spent[part] = 0.0
    sync()
    wall, cpu = time.perf_counter(), time.process_time()
    model.train(args.updates, model.batch_size)
    sync()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU, {args.threads} torch thread(s)"
    load = os.getloadavg()
    print(f"DelayedEZ atari entry on {name}; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
    print(f"acting: {args.fill} env steps, {args.envs} envs per batched search: "
          f"{args.fill / acting:.1f} decisions/s ({1000 * acting / (args.fill / args.envs):.1f} ms per search)")
    per = args.updates
    print(f"update (batch {model.batch_size}, {model.num_unroll_steps} unroll steps, reanalyze_ratio "
          f"{model.reanalyze_ratio}): {wall / per:.3f} s wall, {cpu / per:.3f} s process CPU per update "
          f"(mean of {per})")
    rest = wall - spent["reanalysis"] - spent["targets"]
    print(f"  reanalysis {spent['reanalysis'] / per:.3f} s, targets {spent['targets'] / per:.3f} s, "
          f"loss/backward/optimiser {rest / per:.3f} s")
    if args.json:
        print(json.dumps({
            "update_s": wall / per, "update_cpu_s": cpu / per, "reanalysis_s": spent["reanalysis"] / per,
            "targets_s": spent["targets"] / per, "acting_decisions_per_s": args.fill / acting,
        }))


if __name__ == "__main__":
    main()
