"""How much of a reanalysed policy target is the search's own noise: DelayedEZ's CartPole entry, the top actions
of repeated reanalysis searches of the same replayed states.

Trains the ``CartPole-v1`` entry of ``hyperparams/delayed_ez.yml`` for ``--steps`` env steps (as
``dez_delay_learning.py`` builds it, ``-params`` overriding), samples replayed positions that hold a stored search
target, and searches each ``--repeats`` times with the target network, as reanalysis does (with its root
noise) and without the noise, at each of ``--simulations``. For each setting it prints the share of positions
whose top action differs between two repeats (the noise floor of ``reanalysis/overturned``), between a repeat
and the stored search (what ``reanalysis/overturned`` logs), and from a linear controller that scores 500
(:data:`CONTROLLER`; one good policy among many, so a yardstick, not the truth), with the stored search's
disagreement with the controller, the top action's mean share of the root visits and the share of the
commonest top action.

    python benchmarks/dez_target_agreement.py --steps 6000 --seed 100 --simulations 16 64
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import pathlib
import time

import numpy as np
import torch
import yaml
from dez_delay_learning import build

from delayzoo.agents.delayed_ez.mcts import MCTS
from delayzoo.agents.delayed_ez.reanalysis import batch_stacks
from delayzoo.version import source_commit

CONTROLLER = np.array([0.1, 0.5, 1.0, 1.0])
"""Push right when ``CONTROLLER . observation > 0``: 500 on each of 10 CartPole-v1 episodes (seeds 1000-1009)."""


def flip_rate(tops: list[np.ndarray]) -> float:
    """Mean share of positions whose top actions differ, over every pair of repeats."""
    return float(np.mean([np.mean(a != b) for a, b in itertools.combinations(tops, 2)]))


def agreement(model, simulations: int, repeats: int, positions: int, rng: np.random.Generator) -> dict[str, float]:
    """The figures of one number of simulations (see the module docstring)."""
    batch = model.replay_buffer.sample(positions, model.target_config, rng, 1.0)
    rows, cols = np.nonzero(batch.policy_valid & (batch.stored_policy_mask > 0))
    cpu = torch.device("cpu")
    net = model.policy.target_network
    mcts = MCTS(int(model.action_space.n), dataclasses.replace(model.search_config, num_simulations=simulations))
    stacks = batch_stacks(batch, batch.policy_offset, model.frame_stack, cpu)[rows, cols]
    with torch.no_grad():
        root = net.initial_inference(stacks)
    stored = batch.stored_policy[rows, cols].argmax(axis=1)
    observations = stacks.numpy()
    controller = (observations.reshape(len(rows), -1)[:, -4:] @ CONTROLLER > 0).astype(int)
    result: dict[str, float] = {
        "simulations": simulations, "positions": len(rows),
        "stored_controller_flip": round(float(np.mean(stored != controller)), 4),
    }
    for noise in (True, False):
        tops, top_shares = [], []
        for _ in range(repeats):
            search = mcts.search(net, root.latent, root.policy_logits, rng, noise, root_value_logits=root.value_logits)
            weights = search.policy / search.policy.sum(axis=1, keepdims=True)
            tops.append(weights.argmax(axis=1))
            top_shares.append(weights.max(axis=1).mean())
        name = "noise" if noise else "no_noise"
        result[f"{name}_repeat_flip"] = round(flip_rate(tops), 4)
        result[f"{name}_stored_flip"] = round(float(np.mean([np.mean(top != stored) for top in tops])), 4)
        result[f"{name}_controller_flip"] = round(float(np.mean([np.mean(top != controller) for top in tops])), 4)
        result[f"{name}_top_visit_share"] = round(float(np.mean(top_shares)), 4)
        commonest = np.bincount(np.concatenate(tops)).max() / (repeats * len(rows))
        result[f"{name}_commonest_action"] = round(float(commonest), 4)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6000, help="training env steps before the measurement")
    parser.add_argument("--seed", type=int, default=100)
    parser.add_argument("--simulations", nargs="+", type=int, default=[16, 64])
    parser.add_argument("--repeats", type=int, default=4, help="searches of each position per setting")
    parser.add_argument("--positions", type=int, default=128, help="replay samples (each of K+1 positions)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("-params", nargs="*", default=[], help="hyperparameter overrides, key:value (YAML values)")
    parser.add_argument("--json", type=pathlib.Path, help="append one JSON line per run to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    overrides = {key: yaml.safe_load(value) for key, value in (item.split(":", 1) for item in args.params)}
    cpu = time.process_time()
    model, _ = build(0, "forward", args.seed, overrides)
    model.learn(args.steps)
    rng = np.random.default_rng(args.seed)
    rows = [agreement(model, n, args.repeats, args.positions, rng) for n in args.simulations]
    run = {
        "seed": args.seed, "steps": model.num_timesteps, "overrides": overrides, "rows": rows,
        "cpu_s": round(time.process_time() - cpu, 1), "load_average": [round(x, 2) for x in os.getloadavg()],
        "commit": source_commit(),
    }
    for row in rows:
        print(json.dumps(row))
    if args.json:
        with args.json.open("a") as file:
            file.write(json.dumps(run) + "\n")


if __name__ == "__main__":
    main()
