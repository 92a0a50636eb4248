"""Speed of the compiled MCTS tree (ctree) against its pure-Python twin (ptree).

Tree work only: the model is replaced by random arrays drawn before the clock starts. Prints
simulations per second (one simulation = one root descending once) for both trees at B=64, A=18,
50 simulations, their ratio, and the ctree cost per simulation per root at 50..400 simulations.
That cost grows only with the depth of the paths (and cache effects), not with the size of the
tree: min-max is updated along the backed-up path only, never rebuilt over the whole tree.

Run: ``python benchmarks/ctree_speed.py``
"""

import argparse
import time
from types import ModuleType

import numpy as np

from delayzoo.ctree import _ctree, ptree

GAMMA = 0.997**4
HORIZON = 5  # EfficientZero's lstm_horizon_len: the value prefix restarts every 5 steps


def make_model(batch: int, actions: int, simulations: int, seed: int) -> dict:
    """Random stand-ins for the network outputs of one search."""
    rng = np.random.default_rng(seed)
    return {
        "root_logits": rng.normal(size=(batch, actions)),
        "noise": rng.dirichlet([0.3] * actions, size=batch),
        "value_prefix": rng.normal(size=(simulations, batch)),
        "value": rng.normal(size=(simulations, batch)),
        "logits": rng.normal(size=(simulations, batch, actions)),
    }


def search(tree: ModuleType, model: dict, simulations: int, seed: int) -> float:
    """One batched search of ``simulations`` simulations driven by the random model.

    :return: the mean depth of the expanded leaves
    """
    batch, actions = model["root_logits"].shape
    roots = tree.Roots(batch, actions, simulations + 1, seed=seed)
    roots.prepare(np.zeros(batch), model["root_logits"], model["noise"], 0.25)
    minmax, results = tree.MinMaxStatsList(batch), tree.SearchResults(batch)
    depth = 0
    for s in range(1, simulations + 1):
        tree.batch_traverse(roots, 1.25, 19652, GAMMA, minmax, results)
        lengths = results.search_lengths()
        depth += int(lengths.sum())
        is_reset = lengths % HORIZON == 0
        vp, value, logits = model["value_prefix"][s - 1], model["value"][s - 1], model["logits"][s - 1]
        tree.batch_backpropagate(s, GAMMA, vp, value, logits, minmax, results, is_reset)
    roots.distributions()
    roots.values()
    return depth / (simulations * batch)


def seconds_per_search(
    tree: ModuleType, batch: int, actions: int, simulations: int, min_time: float
) -> tuple[float, float]:
    """Fastest CPU time of one search over repeats lasting ``min_time`` seconds in all.

    CPU time of this process and the fastest repeat, so that other jobs on a shared machine
    disturb the figure as little as possible.

    :return: (seconds per search, mean leaf depth)
    """
    models = [make_model(batch, actions, simulations, seed) for seed in range(3)]
    search(tree, models[0], simulations, 0)  # warm-up
    times: list[float] = []
    depths: list[float] = []
    while sum(times) < min_time or len(times) < 3:
        model = models[len(times) % len(models)]
        start = time.process_time()
        depths.append(search(tree, model, simulations, len(times)))
        times.append(time.process_time() - start)
    return min(times), float(np.mean(depths))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--actions", type=int, default=18)
    parser.add_argument("--min-time", type=float, default=2.0, help="seconds of repeats per measurement")
    args = parser.parse_args()
    B, A = args.batch, args.actions

    print(f"B={B}, A={A}, tree work only (random arrays as the model)\n")
    per_root = {}
    for name, tree in (("ctree", _ctree), ("ptree", ptree)):
        t, _ = seconds_per_search(tree, B, A, 50, args.min_time)
        per_root[name] = B * 50 / t
        print(
            f"{name}: 50 simulations in {t * 1e3:8.2f} ms  ->  {per_root[name]:12,.0f} sims/s  "
            f"({1e6 / per_root[name]:7.2f} us per simulation per root)"
        )
    print(f"ratio ctree / ptree: {per_root['ctree'] / per_root['ptree']:.1f}x\n")

    print("ctree cost per simulation per root")
    for simulations in (50, 100, 200, 400):
        t, depth = seconds_per_search(_ctree, B, A, simulations, args.min_time / 2)
        print(f"  {simulations:4d} simulations: {t / (B * simulations) * 1e6:6.2f} us  (mean leaf depth {depth:.2f})")


if __name__ == "__main__":
    main()
