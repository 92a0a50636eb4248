"""Helpers for the ctree tests: both tree implementations and a search driven by a fixed random model."""

from collections.abc import Callable
from types import ModuleType

import numpy as np

from delayzoo.ctree import _ctree, ptree

TREES = {"ptree": ptree, "ctree": _ctree}
GAMMA = 0.997**4
C_VISIT, C_SCALE = 50.0, 0.1


class ToyModel:
    """A fixed random "model": latents evolve by a random recurrent map, heads are random linear maps.

    The same (latent, action) always gives the same outputs, like a real network.
    """

    def __init__(self, num_actions: int, seed: int, width: int = 6) -> None:
        rng = np.random.default_rng(seed)
        self.num_actions = num_actions
        self.transition = rng.normal(size=(width, width)) / np.sqrt(width)
        self.action_embedding = rng.normal(size=(num_actions, width))
        self.prefix_head = rng.normal(size=width)
        self.value_head = rng.normal(size=width) * 2.0
        self.policy_head = rng.normal(size=(width, num_actions)) * 1.5

    def initial(self, batch: int, rng: np.random.Generator) -> np.ndarray:
        return rng.normal(size=(batch, self.transition.shape[0]))

    def policy_logits(self, latent: np.ndarray) -> np.ndarray:
        return latent @ self.policy_head

    def step(self, latent: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        nxt = np.tanh(latent @ self.transition + self.action_embedding[action])
        return nxt, nxt @ self.prefix_head, nxt @ self.value_head, self.policy_logits(nxt)


def run_search(
    module: ModuleType,
    *,
    batch: int,
    actions: int,
    simulations: int,
    seed: int,
    noise: bool = False,
    mask: bool = False,
    horizon: int = 0,
    root_prefix: bool = False,
    cast: Callable[[np.ndarray], np.ndarray] = np.asarray,
    method: str = "puct",
    q_normalization: str = "tree",
    num_considered: int = 16,
) -> dict:
    """Run one batched search of ``module`` driven by ToyModel; record everything observable.

    :param noise: Dirichlet noise (pUCT) or Gumbel noise (``method="gumbel"``; zeros without)
    :param horizon: reset the value prefix after leaves whose depth is a multiple of it (0: never)
    :param cast: applied to every float array handed to the tree
    """
    rng = np.random.default_rng(seed)
    model = ToyModel(actions, seed)
    root_latent = model.initial(batch, rng)
    gumbel = method == "gumbel"
    noise_arr = rng.dirichlet([0.3] * actions, size=batch) if noise and not gumbel else None
    gumbel_arr = (rng.gumbel(size=(batch, actions)) if noise else np.zeros((batch, actions))) if gumbel else None
    legal = None
    if mask:
        legal = rng.random((batch, actions)) < 0.6
        legal[np.arange(batch), rng.integers(actions, size=batch)] = True
    prefix = rng.normal(size=batch) if root_prefix else np.zeros(batch)

    roots = module.Roots(batch, actions, simulations + 1, seed=seed)
    roots.prepare(
        cast(prefix),
        cast(model.policy_logits(root_latent)),
        None if noise_arr is None else cast(noise_arr),
        0.25,
        legal,
        values=cast(root_latent @ model.value_head),
        gumbel=None if gumbel_arr is None else cast(gumbel_arr),
        num_considered=num_considered,
    )
    minmax = module.MinMaxStatsList(batch, q_normalization=q_normalization)
    results = module.SearchResults(batch)
    latents = [root_latent]
    depths = [np.zeros(batch, dtype=np.int64)]
    record = {"steps": [], "bounds": [], "legal": legal}
    for s in range(1, simulations + 1):
        if gumbel:
            parent, index, action = module.batch_traverse_gumbel(roots, C_VISIT, C_SCALE, GAMMA, minmax, results)
        else:
            parent, index, action = module.batch_traverse(roots, 1.25, 19652, GAMMA, minmax, results)
        lengths = results.search_lengths()
        parent_latent = np.stack([latents[p][b] for p, b in zip(parent, index)])
        new_latent, vp, value, logits = model.step(parent_latent, action)
        is_reset = lengths % horizon == 0 if horizon else np.zeros(batch, dtype=bool)
        module.batch_backpropagate(
            s, GAMMA, cast(vp), cast(value), cast(logits), minmax, results, is_reset
        )
        latents.append(new_latent)
        depths.append(np.array([depths[p][b] for p, b in zip(parent, index)]) + 1)
        record["steps"].append((parent.copy(), index.copy(), action.copy(), lengths.copy(), depths[-1]))
        record["bounds"].append(tuple(np.copy(x) for x in minmax.bounds()))
    record["distributions"] = roots.distributions()
    record["values"] = roots.values()
    if gumbel:
        record["actions"], record["policy"] = module.gumbel_outputs(roots, C_VISIT, C_SCALE, GAMMA, minmax)
    record["roots"] = roots
    return record
