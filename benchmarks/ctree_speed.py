"""Speed of the compiled MCTS tree (ctree) against its pure-Python twin (ptree), and of its two searches.

Tree work only: the model is replaced by random arrays drawn before the clock starts. Prints
simulations per second (one simulation = one root descending once) for both trees at B=64, A=18,
50 simulations, their ratio, and the ctree cost per simulation per root at 50..400 simulations.
That cost grows only with the depth of the paths (and cache effects), not with the size of the
tree: min-max is updated along the backed-up path only, never rebuilt over the whole tree.

``--method puct`` (default) or ``gumbel`` chooses the search of that report; ``--method both`` instead
compares the two searches side by side in the compiled tree: the median over interleaved rounds of the
process CPU time per simulation per root, Gumbel against pUCT, at the default size (A=18, 50 simulations)
and at 2 and 3 actions with 16 simulations (CartPole's and a small game's settings), with the load average.

Run: ``python benchmarks/ctree_speed.py [--method both]``
"""

import argparse
import os
import statistics
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
        "root_values": rng.normal(size=batch),
        "noise": rng.dirichlet([0.3] * actions, size=batch),
        "gumbel": rng.gumbel(size=(batch, actions)),
        "value_prefix": rng.normal(size=(simulations, batch)),
        "value": rng.normal(size=(simulations, batch)),
        "logits": rng.normal(size=(simulations, batch, actions)),
    }


def search(tree: ModuleType, model: dict, simulations: int, seed: int, method: str = "puct") -> float:
    """One batched search of ``simulations`` simulations driven by the random model, with its outputs.

    :param method: ``"puct"`` (with Dirichlet noise) or ``"gumbel"`` (with Gumbel noise, 16 considered actions)
    :return: the mean depth of the expanded leaves
    """
    batch, actions = model["root_logits"].shape
    gumbel = method == "gumbel"
    roots = tree.Roots(batch, actions, simulations + 1, seed=seed)
    roots.prepare(
        np.zeros(batch), model["root_logits"], None if gumbel else model["noise"], 0.25, None, model["root_values"],
        model["gumbel"] if gumbel else None, 16,
    )
    minmax, results = tree.MinMaxStatsList(batch), tree.SearchResults(batch)
    depth = 0
    for s in range(1, simulations + 1):
        if gumbel:
            tree.batch_traverse_gumbel(roots, 50.0, 0.1, GAMMA, minmax, results)
        else:
            tree.batch_traverse(roots, 1.25, 19652, GAMMA, minmax, results)
        lengths = results.search_lengths()
        depth += int(lengths.sum())
        is_reset = lengths % HORIZON == 0
        vp, value, logits = model["value_prefix"][s - 1], model["value"][s - 1], model["logits"][s - 1]
        tree.batch_backpropagate(s, GAMMA, vp, value, logits, minmax, results, is_reset)
    roots.distributions()
    roots.values()
    if gumbel:
        tree.gumbel_outputs(roots, 50.0, 0.1, GAMMA, minmax)
    return depth / (simulations * batch)


def seconds_per_search(
    tree: ModuleType, batch: int, actions: int, simulations: int, min_time: float, method: str = "puct"
) -> tuple[float, float]:
    """Fastest CPU time of one search over repeats lasting ``min_time`` seconds in all.

    CPU time of this process and the fastest repeat, so that other jobs on a shared machine
    disturb the figure as little as possible.

    :return: (seconds per search, mean leaf depth)
    """
    models = [make_model(batch, actions, simulations, seed) for seed in range(3)]
    search(tree, models[0], simulations, 0, method)  # warm-up
    times: list[float] = []
    depths: list[float] = []
    while sum(times) < min_time or len(times) < 3:
        model = models[len(times) % len(models)]
        start = time.process_time()
        depths.append(search(tree, model, simulations, len(times), method))
        times.append(time.process_time() - start)
    return min(times), float(np.mean(depths))


def compare_methods(batch: int, actions: int, rounds: int, min_time: float) -> None:
    """Gumbel against pUCT in the compiled tree, side by side: medians of interleaved rounds of process CPU time."""
    print(f"Gumbel against pUCT, ctree, B={batch}: median of {rounds} interleaved rounds of the fastest repeat "
          f"(process CPU time), load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'actions':>7} {'sims':>4} {'puct us/sim/root':>17} {'gumbel us/sim/root':>19} {'gumbel/puct':>11}")
    for A, simulations in ((actions, 50), (2, 16), (3, 16)):
        per_sim: dict[str, list[float]] = {"puct": [], "gumbel": []}
        for _ in range(rounds):
            for method in per_sim:
                t, _ = seconds_per_search(_ctree, batch, A, simulations, min_time, method)
                per_sim[method].append(t / (batch * simulations) * 1e6)
        puct, gumbel = statistics.median(per_sim["puct"]), statistics.median(per_sim["gumbel"])
        print(f"{A:7d} {simulations:4d} {puct:17.3f} {gumbel:19.3f} {gumbel / puct:11.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--actions", type=int, default=18)
    parser.add_argument("--min-time", type=float, default=2.0, help="seconds of repeats per measurement")
    parser.add_argument("--method", choices=("puct", "gumbel", "both"), default="puct",
                        help="the search measured; both: Gumbel against pUCT, side by side")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --method both")
    args = parser.parse_args()
    B, A = args.batch, args.actions
    if args.method == "both":
        compare_methods(B, A, args.rounds, args.min_time / 4)
        return

    print(f"B={B}, A={A}, {args.method} search, tree work only (random arrays as the model)\n")
    per_root = {}
    for name, tree in (("ctree", _ctree), ("ptree", ptree)):
        t, _ = seconds_per_search(tree, B, A, 50, args.min_time, args.method)
        per_root[name] = B * 50 / t
        print(
            f"{name}: 50 simulations in {t * 1e3:8.2f} ms  ->  {per_root[name]:12,.0f} sims/s  "
            f"({1e6 / per_root[name]:7.2f} us per simulation per root)"
        )
    print(f"ratio ctree / ptree: {per_root['ctree'] / per_root['ptree']:.1f}x\n")

    print("ctree cost per simulation per root")
    for simulations in (50, 100, 200, 400):
        t, depth = seconds_per_search(_ctree, B, A, simulations, args.min_time / 2, args.method)
        print(f"  {simulations:4d} simulations: {t / (B * simulations) * 1e6:6.2f} us  (mean leaf depth {depth:.2f})")


if __name__ == "__main__":
    main()
