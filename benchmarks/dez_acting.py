"""Speed of DelayedEZ's batched acting: decisions per second and where the time goes.

One decision per env: encode the observation, roll the dynamics through the pending actions (each
env its own delay), and run one batched search for all envs. Defaults: B=8 envs, 50 simulations,
EfficientZero's Atari network (12x96x96 frames, 18 actions), delays drawn in 0..5. The time is
split into network (every forward call of the model), tree (the ctree calls) and the rest
(driver glue: gathering latents, numpy/torch conversions).

Run: ``python benchmarks/dez_acting.py`` (``--device cuda`` on a GPU machine, ``--threads`` for CPU);
``--json`` ends the output with the figures as one JSON line (``benchmarks/gpu_check.sh`` reads it).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from types import SimpleNamespace

import numpy as np
import torch
from gymnasium import spaces

import delayzoo.ctree
from delayzoo.agents.common.checks import device_argument
from delayzoo.agents.delayed_ez.config import SearchConfig
from delayzoo.agents.delayed_ez.policies import MultiInputPolicy

TREE_NAMES = ("Roots", "MinMaxStatsList", "SearchResults", "batch_traverse", "batch_backpropagate")


def _timed(fn, bucket: str, clock: dict, sync):
    """``fn`` adding its wall time to ``clock[bucket]`` (outermost call only, so nested calls count once)."""

    def wrapper(*args, **kwargs):
        if clock[bucket + "_depth"]:
            return fn(*args, **kwargs)
        clock[bucket + "_depth"] += 1
        sync()
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            sync()
            clock[bucket] += time.perf_counter() - start
            clock[bucket + "_depth"] -= 1

    return wrapper


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--simulations", type=int, default=50)
    parser.add_argument("--actions", type=int, default=18)
    parser.add_argument("--max-delay", type=int, default=5)
    parser.add_argument("--decisions", type=int, default=10, help="timed batched decisions (after 2 warm-up ones)")
    parser.add_argument("--device", type=device_argument, default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="end with the figures as one JSON line")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    observation_space = spaces.Dict(
        {
            "observation": spaces.Box(0, 255, (12, 96, 96), dtype=np.uint8),
            "pending_actions": spaces.MultiDiscrete(np.full(args.max_delay, args.actions)),
            "delay": spaces.Discrete(args.max_delay + 1),
        }
    )
    policy = MultiInputPolicy(
        observation_space, spaces.Discrete(args.actions), lambda _: 0.2,
        search_config=SearchConfig(num_simulations=args.simulations), seed=0,
    ).to(device)
    clock: dict[str, float] = defaultdict(float)
    tree = SimpleNamespace(**{name: getattr(delayzoo.ctree, name) for name in TREE_NAMES})
    for name in ("batch_traverse", "batch_backpropagate"):
        setattr(tree, name, _timed(getattr(tree, name), "tree", clock, lambda: None))
    roots_class = tree.Roots
    tree.Roots = _timed(roots_class, "tree", clock, lambda: None)
    policy.mcts.tree = tree
    network = policy.network
    for name in ("initial_inference", "recurrent_inference", "transition", "prediction"):
        setattr(network, name, _timed(getattr(network, name), "network", clock, sync))

    rng = np.random.default_rng(0)
    obs = {
        "observation": torch.as_tensor(rng.integers(0, 256, (args.envs, 12, 96, 96), dtype=np.uint8), device=device),
        "pending_actions": torch.as_tensor(rng.integers(0, args.actions, (args.envs, args.max_delay)), device=device),
        "delay": torch.as_tensor(rng.integers(0, args.max_delay + 1, args.envs), device=device),
    }
    for _ in range(2):
        policy.act(obs, deterministic=False, add_noise=True)
    clock.clear()
    sync()
    start = time.perf_counter()
    for _ in range(args.decisions):
        policy.act(obs, deterministic=False, add_noise=True)
    sync()
    total = time.perf_counter() - start
    network_s, tree_s = clock["network"], clock["tree"]
    other = total - network_s - tree_s
    print(
        f"DelayedEZ acting: B={args.envs}, {args.simulations} simulations, A={args.actions}, paper network "
        f"({sum(p.numel() for p in network.parameters()) / 1e6:.2f} M parameters), device={device}, "
        f"threads={args.threads}, ctree compiled={delayzoo.ctree.HAS_CTREE}"
    )
    rate = args.decisions * args.envs / total
    print(f"  {args.decisions} batched decisions in {total:.2f} s: {rate:.1f} env decisions/s "
          f"({total / args.decisions * 1000:.0f} ms per batched decision)")
    shares = f"network {100 * network_s / total:.1f}%  tree {100 * tree_s / total:.1f}%"
    print(f"  {shares}  other {100 * other / total:.1f}%")
    if args.json:
        print(json.dumps({"decisions_per_s": rate, "network_share": network_s / total, "tree_share": tree_s / total}))


if __name__ == "__main__":
    main()
