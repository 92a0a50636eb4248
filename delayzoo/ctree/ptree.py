"""Pure-Python twin of the compiled tree :mod:`delayzoo.ctree._ctree`: same API, same semantics.

It is the reference the compiled tree is tested against and the fallback when the extension is
not built. Both perform the same double-precision operations in the same order, so they build the
same trees and give the same visit counts.

Semantics (EfficientZero's batched pUCT search and Gumbel MuZero's search, B roots with A actions):

- A node is expanded once, with priors ``softmax(policy_logits)`` (over the legal actions at a
  root). ``prepare`` expands the roots and mixes in the noise: ``prior = (1 - f) * prior + f * noise``.
- Edge reward of child ``c`` of node ``p``: ``vp_c - vp_p``, or ``vp_c`` when ``p.is_reset``
  (EfficientZero's value prefix, restarted every ``lstm_horizon_len`` steps).
- ``Q(p, c) = reward_c + discount * value_c`` with ``value_c = value_sum_c / visits_c``.
- pUCT at node ``p`` with ``N = visits_p - 1`` (the sum of its children's visits)::

      score(a) = prior_a * (c_init + log((N + c_base + 1) / c_base)) * sqrt(N) / (n_a + 1)
                 + clamp(normalize(Q(p, a)), 0, 1)

  An unvisited child is valued at the node's mean Q: at a root, the mean Q of its visited
  children (0 before any); elsewhere ``(q_parent + sum of visited children's Q) / (visited + 1)``
  where ``q_parent`` is the mean Q of the node above on the current path.
- ``normalize(q) = (q - min) / max(max - min, value_delta_max)`` when ``max > min``, else ``q``.
  With ``MinMaxStatsList(q_normalization="tree")`` min and max are taken over the Q values of all
  visited non-root nodes of that root's tree, exactly what EfficientZero recomputes over the whole
  tree after every backup. Only the nodes on the backed-up path change their Q, so a min/max
  segment tree over node slots is updated along the path alone, in O(depth * log(max_nodes)).
  With ``"parent_siblings"`` (mctx's ``qtransform_by_parent_and_siblings``) each node takes the
  min and max of its visited children's Q and its own value ``V``: ``value_sum / visits`` below
  the root, ``(network value + value_sum) / visits`` at the root (its expansion visit counts the
  network value ``values`` given to ``prepare``).
- Ties: every legal action whose score is within 1e-6 of the best is a candidate; one is drawn
  uniformly by a splitmix64 generator seeded by ``Roots(seed=...)`` (``next() % count``), drawn
  only when there are two or more candidates. Roots are processed in order 0..B-1.
- Backup from a new leaf with value ``v``: along the path from the leaf to the root, each node
  gets ``value_sum += g`` and ``visits += 1``, then ``g = reward + discount * g``.
- ``Roots.values()`` is the mean of the values backed up into each root.

Gumbel search (Danihelka et al., "Policy improvement by planning with Gumbel", ICLR 2022; the
search of EfficientZero V2), for roots prepared with ``gumbel`` noise ``g`` (scaled; zeros for a
deterministic search) and driven by :func:`batch_traverse_gumbel`; no Dirichlet noise:

- ``sigma(q) = (c_visit + max_b N(b)) * c_scale * clamp(normalize(q), 0, 1)`` over a node's
  children, of the *completed* Q: a visited child's Q; an unvisited child's is the mixed value
  ``(v + N * sum_b pi_b q_b / sum_b pi_b) / (N + 1)`` over the visited children ``b`` (``v`` the
  node's network value, ``N`` its children's visits, ``pi`` the priors floored at the smallest
  normal double).
- Root: sequential halving over ``m = min(num_considered, legal actions)`` actions
  (:func:`halving_schedule`): at simulation ``k`` the chosen action is the best
  ``g + logits + sigma(q)`` among the legal actions whose visit count is the schedule's ``k``-th
  entry. The first ``m`` simulations so visit the top ``m`` of ``g + logits`` (Gumbel-top-k
  sampling without replacement); each phase then keeps the better half.
- Below the root: the best ``pi'(a) - N(a) / (1 + N)``, ``pi' = softmax(logits + sigma(q))``,
  computed as ``prior * exp(sigma - max sigma)`` normalised.
- :func:`gumbel_outputs`: the selected action, the best ``g + logits + sigma(q)`` among the most
  visited legal actions (the survivors), and the improved policy ``softmax(logits + sigma(q))``
  over the legal actions.
- Ties everywhere follow the pUCT rule above.

Differences from EfficientZero's ``ctree`` (all deliberate):

- Min-max: EfficientZero clears the statistics after every backup and rebuilds them by a
  depth-first walk (``update_tree_q``) that takes the parent's value prefix and ``is_reset`` from
  the node popped just before, which is the true parent only for the child popped right after
  it; the other children get the edge reward of an unrelated node. We use the true parent, as
  EfficientZero's own backup and pUCT do, so the statistics are the min-max of the Q values the
  search actually compares.
  Apart from that they are the same set of values, kept exactly (they can shrink when an extreme
  Q moves inward), not a running min/max.
- Ties: EfficientZero collects candidates with a running epsilon test and draws with ``rand()``
  seeded from the clock; we use the rule above with a seeded generator, so searches repeat.
- Root value: EfficientZero divides the root's value sum by its visit count, which includes the
  expansion visit that adds no value; we divide by the number of backups.
- EfficientZero carries the mean Q of the previous root into a root's first simulation; it
  shifts every child's score by the same amount, and we use 0.
- Arithmetic is in double precision (EfficientZero: float32).

Example (pUCT; for the Gumbel search pass ``gumbel=`` to ``prepare``, call
:func:`batch_traverse_gumbel` and read :func:`gumbel_outputs`)::

    roots = Roots(B, A, num_simulations + 1, seed=0)
    roots.prepare(np.zeros(B), logits, noise, 0.25)
    minmax, results = MinMaxStatsList(B), SearchResults(B)
    for s in range(1, num_simulations + 1):
        parent, batch, action = batch_traverse(roots, 1.25, 19652, gamma, minmax, results)
        vp, value, logits = model(latents[parent, batch], action)
        batch_backpropagate(s, gamma, vp, value, logits, minmax, results, is_reset)
    visits, root_values = roots.distributions(), roots.values()
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

_MASK64 = (1 << 64) - 1
_TIE_EPSILON = 1e-6
_INF = math.inf
_TINY = sys.float_info.min
Q_NORMALIZATIONS = ("tree", "parent_siblings")


class _SplitMix64:
    """splitmix64, the generator the compiled tree uses to break ties."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK64

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
        return z ^ (z >> 31)


class _Node:
    """An expanded node. ``slot`` is its index in the root's pool (0 for the root)."""

    __slots__ = (
        "slot", "visits", "value_sum", "value_prefix", "raw_value", "reward", "is_reset", "latent", "prior", "children"
    )

    def __init__(
        self, slot: int, value_prefix: float, reward: float, is_reset: bool, latent: int, raw_value: float = 0.0
    ) -> None:
        self.slot = slot
        self.visits = 0
        self.value_sum = 0.0
        self.value_prefix = value_prefix
        self.raw_value = raw_value
        self.reward = reward
        self.is_reset = is_reset
        self.latent = latent
        self.prior: list[float] = []
        self.children: list[_Node | None] = []

    def expand(self, logits: list[float], legal: list[bool] | None) -> None:
        num_actions = len(logits)
        top = -_INF
        for a in range(num_actions):
            if (legal is None or legal[a]) and logits[a] > top:
                top = logits[a]
        prior = [0.0] * num_actions
        total = 0.0
        for a in range(num_actions):
            if legal is None or legal[a]:
                prior[a] = math.exp(logits[a] - top)
                total += prior[a]
        for a in range(num_actions):
            if legal is None or legal[a]:
                prior[a] = prior[a] / total
        self.prior = prior
        self.children = [None] * num_actions

    def q_value(self, discount: float) -> float:
        return self.reward + discount * (self.value_sum / self.visits)


def _count(x: Any, name: str, minimum: int) -> int:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {x!r}")
    if x < minimum or x > 2**31 - 1:
        raise ValueError(f"{name} must be an int in [{minimum}, 2**31 - 1], got {x}")
    return int(x)


def _finite_rows(x: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        index = np.unravel_index(bad[0], shape)
        raise ValueError(f"{name}[{', '.join(str(int(i)) for i in index)}] is {arr[index]}; all entries must be finite")
    return arr


def _flags(x: Any, shape: tuple[int, ...], name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    return arr != 0


def _check_type(obj: Any, cls: type, name: str) -> None:
    if not isinstance(obj, cls):
        raise TypeError(f"{name} must be a {cls.__name__}, got {type(obj).__name__}")


def _check_discount(discount: float) -> None:
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount}")


def _clamp01(x: float) -> float:
    if x < 0.0:
        return 0.0
    if x > 1.0:
        return 1.0
    return x


def _normalizer(lo: float, hi: float, value_delta_max: float):
    """``normalize`` with the bounds ``lo``, ``hi`` (see the module's docstring)."""
    delta = hi - lo
    scale = value_delta_max if delta < value_delta_max else delta

    def normalize(q: float) -> float:
        return (q - lo) / scale if delta > 0.0 else q

    return normalize


def _check_gumbel_constants(c_visit: float, c_scale: float) -> None:
    if not (c_visit >= 0.0 and math.isfinite(c_visit)):
        raise ValueError(f"c_visit must be finite and >= 0, got {c_visit}")
    if not (c_scale >= 0.0 and math.isfinite(c_scale)):
        raise ValueError(f"c_scale must be finite and >= 0, got {c_scale}")


def halving_schedule(num_considered: int, num_simulations: int) -> np.ndarray:
    """The visit count an action must have to be chosen at each root simulation of sequential halving.

    Sequential halving over ``num_considered`` actions (Gumbel MuZero): every considered action is
    visited equally, then the better half of them, and so on, spending exactly ``num_simulations``.

    :return: int64 ``(num_simulations,)``
    """
    m = _count(num_considered, "num_considered", 1)
    n_sims = _count(num_simulations, "num_simulations", 0)
    if m == 1:  # the one action takes every simulation
        return np.arange(n_sims, dtype=np.int64)
    rounds = 0  # ceil(log2(m)) halvings
    while (1 << rounds) < m:
        rounds += 1
    visits = [0] * m
    out: list[int] = []
    n = m
    while len(out) < n_sims:
        for _ in range(max(1, n_sims // (rounds * n))):
            out.extend(visits[:n])
            for i in range(n):
                visits[i] += 1
        n = max(2, n // 2)
    return np.array(out[:n_sims], dtype=np.int64)


def _select(rng: _SplitMix64, scores: list[float], best: float) -> int:
    """The tie rule: one of the actions within 1e-6 of the best score (illegal ones hold -inf)."""
    threshold = best - _TIE_EPSILON
    candidates = [a for a, score in enumerate(scores) if score >= threshold]
    return candidates[0] if len(candidates) == 1 else candidates[rng.next() % len(candidates)]


def _completed_sigma(
    node: _Node,
    legal: list[bool] | None,
    node_value: float,
    discount: float,
    tree_normalize,
    value_delta_max: float,
    c_visit: float,
    c_scale: float,
    sigma: list[float],
) -> None:
    """Gumbel MuZero's sigma of the completed Q values of ``node``'s children, into ``sigma`` (legal actions)."""
    max_visits = 0
    total_visits = 0
    prior_sum = weighted = 0.0
    lo = hi = node_value
    for a, child in enumerate(node.children):
        if child is None or (legal is not None and not legal[a]):
            continue
        q = child.q_value(discount)
        p = node.prior[a] if node.prior[a] > _TINY else _TINY
        sigma[a] = q
        prior_sum += p
        weighted += p * q
        total_visits += child.visits
        if child.visits > max_visits:
            max_visits = child.visits
        if q < lo:
            lo = q
        if q > hi:
            hi = q
    if total_visits > 0:
        mixed = (node.raw_value + float(total_visits) * (weighted / prior_sum)) / (float(total_visits) + 1.0)
    else:
        mixed = node.raw_value
    normalize = tree_normalize if tree_normalize is not None else _normalizer(lo, hi, value_delta_max)
    scale = (c_visit + max_visits) * c_scale
    for a, child in enumerate(node.children):
        if legal is not None and not legal[a]:
            continue
        sigma[a] = scale * _clamp01(normalize(mixed if child is None else sigma[a]))


class Roots:
    """B search trees with A actions, each holding at most ``max_nodes`` expanded nodes.

    :param num_roots: number of roots B searched together
    :param num_actions: number of actions A
    :param max_nodes: nodes per root, at least ``num_simulations + 1``
    :param seed: seed of the generator that breaks pUCT ties
    """

    _next_uid = 1

    def __init__(self, num_roots: int, num_actions: int, max_nodes: int, seed: int = 0) -> None:
        self.num_roots = _count(num_roots, "num_roots", 1)
        self.num_actions = _count(num_actions, "num_actions", 1)
        self.max_nodes = _count(max_nodes, "max_nodes", 1)
        if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {seed!r}")
        if not 0 <= seed < 2**64:
            raise ValueError(f"seed must be in [0, 2**64), got {seed}")
        self._rng = _SplitMix64(int(seed))
        self._uid = Roots._next_uid
        Roots._next_uid += 1
        self._generation = 0
        self._trees: list[list[_Node]] = []
        self._legal: list[list[bool]] = []
        self._gumbel: list[list[float]] | None = None
        self._logits: list[list[float]] = []
        self._considered: list[int] = []
        self._schedules: dict[int, list[int]] = {}

    @property
    def num_nodes(self) -> int:
        """Expanded nodes per root in the current search (0 before :meth:`prepare`)."""
        return len(self._trees[0]) if self._trees else 0

    def prepare(
        self,
        value_prefix: Any,
        policy_logits: Any,
        noise: Any = None,
        noise_fraction: float = 0.25,
        legal_mask: Any = None,
        values: Any = None,
        gumbel: Any = None,
        num_considered: int = 16,
    ) -> None:
        """Start a new search: expand every root.

        :param value_prefix: (B,) value prefix of the roots (usually 0)
        :param policy_logits: (B, A) policy logits of the roots
        :param noise: (B, A) exploration noise (e.g. Dirichlet samples) or None
        :param noise_fraction: weight f of the noise: prior = (1 - f) * prior + f * noise
        :param legal_mask: (B, A) bool legal actions of the roots, or None for all legal
        :param values: (B,) the network's values of the roots (the Gumbel search's mixed value and the
            per-node normalisation), or None for zeros
        :param gumbel: (B, A) Gumbel noise (scaled; zeros for none): the roots are then searched by
            :func:`batch_traverse_gumbel`; None: by :func:`batch_traverse` (pUCT)
        :param num_considered: actions sampled without replacement at each Gumbel root (capped by its
            legal actions)
        """
        B, A = self.num_roots, self.num_actions
        vp = _finite_rows(value_prefix, (B,), "value_prefix").tolist()
        logits = _finite_rows(policy_logits, (B, A), "policy_logits").tolist()
        eta = None if noise is None else _finite_rows(noise, (B, A), "noise").tolist()
        raw = [0.0] * B if values is None else _finite_rows(values, (B,), "values").tolist()
        g = None if gumbel is None else _finite_rows(gumbel, (B, A), "gumbel").tolist()
        m = _count(num_considered, "num_considered", 1)
        if g is not None and eta is not None:
            raise ValueError("the Gumbel search takes no Dirichlet noise: pass noise or gumbel, not both")
        f = float(noise_fraction)
        if not 0.0 <= f <= 1.0:
            raise ValueError(f"noise_fraction must be in [0, 1], got {noise_fraction}")
        if legal_mask is None:
            legal = [[True] * A for _ in range(B)]
        else:
            legal = _flags(legal_mask, (B, A), "legal_mask").tolist()
        for b, row in enumerate(legal):
            if not any(row):
                raise ValueError(f"legal_mask[{b}] has no legal action; every root needs at least one")
        self._generation += 1
        self._legal = legal
        self._gumbel = g
        self._logits = logits
        self._considered = [min(sum(row), m, A) for row in legal]
        self._trees = []
        for b in range(B):
            root = _Node(0, vp[b], 0.0, False, 0, raw[b])
            root.visits = 1
            root.expand(logits[b], legal[b])
            if eta is not None:
                for a in range(A):
                    if legal[b][a]:
                        root.prior[a] = root.prior[a] * (1.0 - f) + eta[b][a] * f
            self._trees.append([root])

    def _schedule(self, b: int) -> list[int]:
        m = self._considered[b]
        if m not in self._schedules:
            self._schedules[m] = halving_schedule(m, self.max_nodes - 1).tolist()
        return self._schedules[m]

    def _root_value(self, b: int) -> float:
        root = self._trees[b][0]
        return (root.raw_value + root.value_sum) / root.visits

    def distributions(self) -> np.ndarray:
        """Visit counts of the root children, int64 (B, A)."""
        out = np.zeros((self.num_roots, self.num_actions), dtype=np.int64)
        for b, tree in enumerate(self._trees):
            for a, child in enumerate(tree[0].children):
                if child is not None:
                    out[b, a] = child.visits
        return out

    def values(self) -> np.ndarray:
        """Root values (mean of the values backed up into each root), float64 (B,)."""
        out = np.zeros(self.num_roots, dtype=np.float64)
        for b, tree in enumerate(self._trees):
            backups = tree[0].visits - 1
            if backups > 0:
                out[b] = tree[0].value_sum / backups
        return out


class MinMaxStatsList:
    """Per-root min-max of the Q values in the tree, used to normalise Q in pUCT.

    The statistics always describe the search they are used with: handed a new search (after
    ``Roots.prepare``) or another ``Roots``, they are rebuilt from that tree, so one object can
    serve many searches.

    :param num_roots: number of roots B
    :param value_delta_max: floor of the max - min range used for normalisation
    :param q_normalization: ``"tree"``: by the min-max of the Q values of the whole tree;
        ``"parent_siblings"``: each node by the min-max of its visited children's Q and its own value
        (no statistics are kept)
    """

    def __init__(self, num_roots: int, value_delta_max: float = 0.01, q_normalization: str = "tree") -> None:
        self.num_roots = _count(num_roots, "num_roots", 1)
        value_delta_max = float(value_delta_max)
        if not (value_delta_max > 0.0 and math.isfinite(value_delta_max)):
            raise ValueError(f"value_delta_max must be finite and > 0, got {value_delta_max}")
        if q_normalization not in Q_NORMALIZATIONS:
            raise ValueError(f"q_normalization must be one of {Q_NORMALIZATIONS}, got {q_normalization!r}")
        self.value_delta_max = value_delta_max
        self.q_normalization = q_normalization
        self._per_node = q_normalization == Q_NORMALIZATIONS[1]
        self._key: tuple[int, int] | None = None
        self._cap = 0
        self._lo: list[list[float]] = []
        self._hi: list[list[float]] = []

    def reset(self) -> None:
        """Forget the statistics; the next call rebuilds them from the tree it is given."""
        self._key = None

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(minimum, maximum) of the Q values in the tree, float64 (B,) each; (inf, -inf) if none."""
        if self._key is None:
            return np.full(self.num_roots, _INF), np.full(self.num_roots, -_INF)
        return np.array([lo[1] for lo in self._lo]), np.array([hi[1] for hi in self._hi])

    def _bind(self, roots: Roots, discount: float) -> None:
        if roots.num_roots != self.num_roots:
            raise ValueError(f"minmax has {self.num_roots} roots but the tree has {roots.num_roots}")
        key = (roots._uid, roots._generation)
        if self._per_node or self._key == key:
            return
        cap = 1
        while cap < roots.max_nodes:
            cap *= 2
        self._cap = cap
        self._lo = [[_INF] * (2 * cap) for _ in range(self.num_roots)]
        self._hi = [[-_INF] * (2 * cap) for _ in range(self.num_roots)]
        self._key = key
        for b, tree in enumerate(roots._trees):
            for node in tree[1:]:
                self._set(b, node.slot, node.q_value(discount))

    def _set(self, b: int, slot: int, q: float) -> None:
        if self._per_node:
            return
        lo, hi = self._lo[b], self._hi[b]
        i = self._cap + slot
        lo[i] = q
        hi[i] = q
        i >>= 1
        while i >= 1:
            lo[i] = lo[2 * i] if lo[2 * i] < lo[2 * i + 1] else lo[2 * i + 1]
            hi[i] = hi[2 * i] if hi[2 * i] > hi[2 * i + 1] else hi[2 * i + 1]
            i >>= 1

    def _tree_normalizer(self, b: int):
        """``normalize`` by the tree's min-max (``None`` with per-node normalisation)."""
        return None if self._per_node else _normalizer(self._lo[b][1], self._hi[b][1], self.value_delta_max)


class SearchResults:
    """Scratch space holding the search paths of the last :func:`batch_traverse`.

    :param num_roots: number of roots B
    """

    def __init__(self, num_roots: int) -> None:
        self.num_roots = _count(num_roots, "num_roots", 1)
        self._roots: Roots | None = None
        self._key: tuple[int, int] | None = None
        self._pending = False
        self._paths: list[list[_Node]] = []
        self._actions: list[int] = []

    def search_lengths(self) -> np.ndarray:
        """Depth of each new leaf (edges from its root) in the last traversal, int64 (B,)."""
        return np.array([len(path) for path in self._paths] or [0] * self.num_roots, dtype=np.int64)


def _begin_traverse(
    roots: Roots, discount: float, minmax: MinMaxStatsList, results: SearchResults, gumbel: bool
) -> None:
    """The checks and set-up shared by both traversals."""
    _check_discount(discount)
    name = "batch_traverse_gumbel" if gumbel else "batch_traverse"
    if not roots._trees:
        raise ValueError(f"call Roots.prepare before {name}")
    if (roots._gumbel is not None) != gumbel:
        raise ValueError(
            "the roots were prepared without gumbel noise: use batch_traverse (pUCT)"
            if gumbel
            else "the roots were prepared with gumbel noise: use batch_traverse_gumbel"
        )
    if roots.num_nodes >= roots.max_nodes:
        raise ValueError(
            f"the node pool is full: max_nodes={roots.max_nodes} allows {roots.max_nodes - 1} simulations; "
            "create Roots with a larger max_nodes"
        )
    if results.num_roots != roots.num_roots:
        raise ValueError(f"results has {results.num_roots} roots but the tree has {roots.num_roots}")
    minmax._bind(roots, discount)


def _end_traverse(
    roots: Roots, results: SearchResults, paths: list[list[_Node]], leaf_actions: list[int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    results._roots = roots
    results._key = (roots._uid, roots._generation)
    results._pending = True
    results._paths = paths
    results._actions = leaf_actions
    parents = np.array([path[-1].latent for path in paths], dtype=np.int64)
    return parents, np.arange(roots.num_roots, dtype=np.int64), np.array(leaf_actions, dtype=np.int64)


def batch_traverse(
    roots: Roots, c_init: float, c_base: float, discount: float, minmax: MinMaxStatsList, results: SearchResults
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Descend every tree by pUCT to an unexpanded child.

    :param roots: the trees
    :param c_init: pUCT constant c1 (1.25 in EfficientZero)
    :param c_base: pUCT constant c2 (19652 in EfficientZero)
    :param discount: discount per tree edge
    :param minmax: min-max statistics of this search
    :param results: scratch space that receives the search paths
    :return: (parent_index, batch_index, last_action), int64 (B,) each: the simulation index of
        the parent's latent, the root index, and the action to apply to the parent's latent
    """
    _check_type(roots, Roots, "roots")
    _check_type(minmax, MinMaxStatsList, "minmax")
    _check_type(results, SearchResults, "results")
    c_init, c_base, discount = float(c_init), float(c_base), float(discount)
    if not math.isfinite(c_init):
        raise ValueError("c_init must be finite")
    if not (c_base > 0.0 and math.isfinite(c_base)):
        raise ValueError(f"c_base must be finite and > 0, got {c_base}")
    _begin_traverse(roots, discount, minmax, results, False)
    rng = roots._rng
    A = roots.num_actions
    per_node = minmax._per_node
    paths: list[list[_Node]] = []
    leaf_actions: list[int] = []
    scores = [0.0] * A
    for b in range(roots.num_roots):
        node = roots._trees[b][0]
        path = [node]
        parent_q = 0.0
        node_value = roots._root_value(b) if per_node else 0.0
        legal: list[bool] | None = roots._legal[b]
        tree_normalize = minmax._tree_normalizer(b)
        is_root = True
        while True:
            total = 0.0
            lo = hi = node_value
            visited = 0
            for a, child in enumerate(node.children):
                if child is not None:
                    scores[a] = child.q_value(discount)
                    total += scores[a]
                    visited += 1
                    if scores[a] < lo:
                        lo = scores[a]
                    if scores[a] > hi:
                        hi = scores[a]
            normalize = _normalizer(lo, hi, minmax.value_delta_max) if per_node else tree_normalize
            if is_root and visited > 0:
                mean_q = total / visited
            else:
                mean_q = (parent_q + total) / (visited + 1)
            parent_q = mean_q
            n_parent = float(node.visits - 1)
            factor = (c_init + math.log((n_parent + c_base + 1.0) / c_base)) * math.sqrt(n_parent)
            unvisited = _clamp01(normalize(mean_q))
            best = -_INF
            for a, child in enumerate(node.children):
                if legal is not None and not legal[a]:
                    scores[a] = -_INF
                    continue
                if child is None:
                    n_child, value_score = 0, unvisited
                else:
                    n_child, value_score = child.visits, _clamp01(normalize(scores[a]))
                scores[a] = node.prior[a] * factor / (n_child + 1.0) + value_score
                if scores[a] > best:
                    best = scores[a]
            action = _select(rng, scores, best)
            nxt = node.children[action]
            if nxt is None:
                break
            node = nxt
            if per_node:
                node_value = node.value_sum / node.visits
            path.append(node)
            legal = None
            is_root = False
        paths.append(path)
        leaf_actions.append(action)
    return _end_traverse(roots, results, paths, leaf_actions)


def batch_traverse_gumbel(
    roots: Roots, c_visit: float, c_scale: float, discount: float, minmax: MinMaxStatsList, results: SearchResults
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Descend every tree by Gumbel MuZero's rules to an unexpanded child.

    :param roots: the trees, prepared with ``gumbel`` noise
    :param c_visit: sigma's visit offset (50 in Gumbel MuZero)
    :param c_scale: sigma's scale (0.1 in Gumbel MuZero)
    :param discount: discount per tree edge
    :param minmax: min-max statistics of this search
    :param results: scratch space that receives the search paths
    :return: (parent_index, batch_index, last_action), as :func:`batch_traverse`
    """
    _check_type(roots, Roots, "roots")
    _check_type(minmax, MinMaxStatsList, "minmax")
    _check_type(results, SearchResults, "results")
    c_visit, c_scale, discount = float(c_visit), float(c_scale), float(discount)
    _check_gumbel_constants(c_visit, c_scale)
    _begin_traverse(roots, discount, minmax, results, True)
    assert roots._gumbel is not None
    rng = roots._rng
    A = roots.num_actions
    paths: list[list[_Node]] = []
    leaf_actions: list[int] = []
    scores = [0.0] * A
    for b in range(roots.num_roots):
        node = roots._trees[b][0]
        legal = roots._legal[b]
        tree_normalize = minmax._tree_normalizer(b)
        _completed_sigma(
            node, legal, roots._root_value(b), discount, tree_normalize, minmax.value_delta_max, c_visit, c_scale,
            scores,
        )
        want = roots._schedule(b)[node.visits - 1]
        g, logits = roots._gumbel[b], roots._logits[b]
        best = -_INF
        for a, child in enumerate(node.children):
            if not legal[a] or (0 if child is None else child.visits) != want:
                scores[a] = -_INF
                continue
            scores[a] = g[a] + logits[a] + scores[a]
            if scores[a] > best:
                best = scores[a]
        if best == -_INF:
            raise RuntimeError("the halving schedule left no action to visit")
        action = _select(rng, scores, best)
        path = [node]
        while node.children[action] is not None:
            nxt = node.children[action]
            assert nxt is not None
            node = nxt
            path.append(node)
            _completed_sigma(
                node, None, node.value_sum / node.visits, discount, tree_normalize, minmax.value_delta_max,
                c_visit, c_scale, scores,
            )
            top = -_INF
            for a in range(A):
                if scores[a] > top:
                    top = scores[a]
            total = 0.0
            for a in range(A):
                scores[a] = node.prior[a] * math.exp(scores[a] - top)
                total += scores[a]
            per_weight = 1.0 / total
            per_visit = 1.0 / node.visits  # 1 / (1 + the sum of the children's visits)
            best = -_INF
            for a, child in enumerate(node.children):
                scores[a] = scores[a] * per_weight - (0 if child is None else child.visits) * per_visit
                if scores[a] > best:
                    best = scores[a]
            action = _select(rng, scores, best)
        paths.append(path)
        leaf_actions.append(action)
    return _end_traverse(roots, results, paths, leaf_actions)


def gumbel_outputs(
    roots: Roots, c_visit: float, c_scale: float, discount: float, minmax: MinMaxStatsList
) -> tuple[np.ndarray, np.ndarray]:
    """The Gumbel search's selected actions and improved policies.

    :return: (actions int64 (B,), improved policies float64 (B, A))
    """
    _check_type(roots, Roots, "roots")
    _check_type(minmax, MinMaxStatsList, "minmax")
    c_visit, c_scale, discount = float(c_visit), float(c_scale), float(discount)
    _check_gumbel_constants(c_visit, c_scale)
    _check_discount(discount)
    if not roots._trees or roots._gumbel is None:
        raise ValueError("gumbel_outputs needs roots prepared with gumbel noise")
    minmax._bind(roots, discount)
    B, A = roots.num_roots, roots.num_actions
    actions = np.empty(B, dtype=np.int64)
    policy = np.empty((B, A), dtype=np.float64)
    scores = [0.0] * A
    for b in range(B):
        root = roots._trees[b][0]
        legal = roots._legal[b]
        g, logits = roots._gumbel[b], roots._logits[b]
        _completed_sigma(
            root, legal, roots._root_value(b), discount, minmax._tree_normalizer(b), minmax.value_delta_max,
            c_visit, c_scale, scores,
        )
        visits = [0 if child is None else child.visits for child in root.children]
        pi = [0.0] * A
        most = 0
        top = -_INF
        for a in range(A):
            if not legal[a]:
                continue
            pi[a] = logits[a] + scores[a]
            if pi[a] > top:
                top = pi[a]
            if visits[a] > most:
                most = visits[a]
        total = 0.0
        for a in range(A):
            pi[a] = math.exp(pi[a] - top) if legal[a] else 0.0
            total += pi[a]
        policy[b] = [x / total for x in pi]
        best = -_INF
        for a in range(A):
            if not legal[a] or visits[a] != most:
                scores[a] = -_INF
                continue
            scores[a] = g[a] + logits[a] + scores[a]
            if scores[a] > best:
                best = scores[a]
        actions[b] = _select(roots._rng, scores, best)
    return actions, policy


def batch_backpropagate(
    new_index: int,
    discount: float,
    value_prefix: Any,
    value: Any,
    policy_logits: Any,
    minmax: MinMaxStatsList,
    results: SearchResults,
    is_reset: Any = None,
) -> None:
    """Expand the leaves of the last traversal and back their values up to the roots.

    :param new_index: simulation index under which the caller stored the leaves' latents (>= 1)
    :param discount: discount per tree edge
    :param value_prefix: (B,) value prefixes predicted for the leaves
    :param value: (B,) values predicted for the leaves
    :param policy_logits: (B, A) policy logits predicted for the leaves
    :param minmax: min-max statistics of this search
    :param results: the results of the last :func:`batch_traverse`
    :param is_reset: (B,) bool, whether the value prefix restarts after each leaf (None: never)
    """
    _check_type(minmax, MinMaxStatsList, "minmax")
    _check_type(results, SearchResults, "results")
    roots = results._roots
    if roots is None:
        raise ValueError("results hold no batch_traverse; call batch_traverse first")
    if isinstance(new_index, (bool, np.bool_)) or not isinstance(new_index, (int, np.integer)):
        raise TypeError(f"new_index must be an int, got {new_index!r}")
    if not 1 <= new_index < 2**62:
        raise ValueError(f"new_index must be >= 1 (index 0 holds the root latents), got {new_index}")
    B, A = roots.num_roots, roots.num_actions
    vp = _finite_rows(value_prefix, (B,), "value_prefix").tolist()
    values = _finite_rows(value, (B,), "value").tolist()
    logits = _finite_rows(policy_logits, (B, A), "policy_logits").tolist()
    resets = [False] * B if is_reset is None else _flags(is_reset, (B,), "is_reset").tolist()
    if not results._pending or results._key != (roots._uid, roots._generation):
        raise ValueError(
            "results hold no pending batch_traverse of the current search; call batch_traverse "
            "once before each batch_backpropagate"
        )
    discount = float(discount)
    _check_discount(discount)
    minmax._bind(roots, discount)
    for b in range(B):
        tree = roots._trees[b]
        path = results._paths[b]
        parent = path[-1]
        reward = vp[b] if parent.is_reset else vp[b] - parent.value_prefix
        leaf = _Node(len(tree), vp[b], reward, resets[b], int(new_index), values[b])
        leaf.expand(logits[b], None)
        parent.children[results._actions[b]] = leaf
        tree.append(leaf)
        full_path = path + [leaf]
        bootstrap = values[b]
        for node in reversed(full_path):
            node.value_sum += bootstrap
            node.visits += 1
            bootstrap = node.reward + discount * bootstrap
        for node in full_path[1:]:
            minmax._set(b, node.slot, node.q_value(discount))
    results._pending = False
