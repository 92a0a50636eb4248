"""Pure-Python twin of the compiled tree :mod:`delayzoo.ctree._ctree`: same API, same semantics.

It is the reference the compiled tree is tested against and the fallback when the extension is
not built. Both perform the same double-precision operations in the same order, so they build the
same trees and give the same visit counts.

Semantics (EfficientZero's batched search, B roots with A actions):

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
- ``normalize(q) = (q - min) / max(max - min, value_delta_max)`` when ``max > min``, else ``q``;
  min and max are taken over the Q values of all visited non-root nodes of that root's tree,
  exactly what EfficientZero recomputes over the whole tree after every backup. Only the nodes on
  the backed-up path change their Q, so a min/max segment tree over node slots is updated along
  the path alone, in O(depth * log(max_nodes)).
- Ties: every legal action whose score is within 1e-6 of the best is a candidate; one is drawn
  uniformly by a splitmix64 generator seeded by ``Roots(seed=...)`` (``next() % count``), drawn
  only when there are two or more candidates. Roots are processed in order 0..B-1.
- Backup from a new leaf with value ``v``: along the path from the leaf to the root, each node
  gets ``value_sum += g`` and ``visits += 1``, then ``g = reward + discount * g``.
- ``Roots.values()`` is the mean of the values backed up into each root.

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

Example::

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
from typing import Any

import numpy as np

_MASK64 = (1 << 64) - 1
_TIE_EPSILON = 1e-6
_INF = math.inf


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

    __slots__ = ("slot", "visits", "value_sum", "value_prefix", "reward", "is_reset", "latent", "prior", "children")

    def __init__(self, slot: int, value_prefix: float, reward: float, is_reset: bool, latent: int) -> None:
        self.slot = slot
        self.visits = 0
        self.value_sum = 0.0
        self.value_prefix = value_prefix
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
    ) -> None:
        """Start a new search: expand every root.

        :param value_prefix: (B,) value prefix of the roots (usually 0)
        :param policy_logits: (B, A) policy logits of the roots
        :param noise: (B, A) exploration noise (e.g. Dirichlet samples) or None
        :param noise_fraction: weight f of the noise: prior = (1 - f) * prior + f * noise
        :param legal_mask: (B, A) bool legal actions of the roots, or None for all legal
        """
        B, A = self.num_roots, self.num_actions
        vp = _finite_rows(value_prefix, (B,), "value_prefix").tolist()
        logits = _finite_rows(policy_logits, (B, A), "policy_logits").tolist()
        eta = None if noise is None else _finite_rows(noise, (B, A), "noise").tolist()
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
        self._trees = []
        for b in range(B):
            root = _Node(0, vp[b], 0.0, False, 0)
            root.visits = 1
            root.expand(logits[b], legal[b])
            if eta is not None:
                for a in range(A):
                    if legal[b][a]:
                        root.prior[a] = root.prior[a] * (1.0 - f) + eta[b][a] * f
            self._trees.append([root])

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
    """

    def __init__(self, num_roots: int, value_delta_max: float = 0.01) -> None:
        self.num_roots = _count(num_roots, "num_roots", 1)
        value_delta_max = float(value_delta_max)
        if not (value_delta_max > 0.0 and math.isfinite(value_delta_max)):
            raise ValueError(f"value_delta_max must be finite and > 0, got {value_delta_max}")
        self.value_delta_max = value_delta_max
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
        if self._key == key:
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
        lo, hi = self._lo[b], self._hi[b]
        i = self._cap + slot
        lo[i] = q
        hi[i] = q
        i >>= 1
        while i >= 1:
            lo[i] = lo[2 * i] if lo[2 * i] < lo[2 * i + 1] else lo[2 * i + 1]
            hi[i] = hi[2 * i] if hi[2 * i] > hi[2 * i + 1] else hi[2 * i + 1]
            i >>= 1

    def _normalize(self, b: int, q: float) -> float:
        lo = self._lo[b][1]
        delta = self._hi[b][1] - lo
        if delta > 0.0:
            return (q - lo) / (self.value_delta_max if delta < self.value_delta_max else delta)
        return q


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
    _check_discount(discount)
    if not roots._trees:
        raise ValueError("call Roots.prepare before batch_traverse")
    if roots.num_nodes >= roots.max_nodes:
        raise ValueError(
            f"the node pool is full: max_nodes={roots.max_nodes} allows {roots.max_nodes - 1} simulations; "
            "create Roots with a larger max_nodes"
        )
    if results.num_roots != roots.num_roots:
        raise ValueError(f"results has {results.num_roots} roots but the tree has {roots.num_roots}")
    minmax._bind(roots, discount)
    rng = roots._rng
    B, A = roots.num_roots, roots.num_actions
    parents = np.empty(B, dtype=np.int64)
    actions = np.empty(B, dtype=np.int64)
    paths: list[list[_Node]] = []
    leaf_actions: list[int] = []
    scores = [0.0] * A
    for b in range(B):
        node = roots._trees[b][0]
        path = [node]
        parent_q = 0.0
        legal: list[bool] | None = roots._legal[b]
        is_root = True
        while True:
            total = 0.0
            visited = 0
            for a, child in enumerate(node.children):
                if child is not None:
                    scores[a] = child.q_value(discount)
                    total += scores[a]
                    visited += 1
            if is_root and visited > 0:
                mean_q = total / visited
            else:
                mean_q = (parent_q + total) / (visited + 1)
            parent_q = mean_q
            n_parent = float(node.visits - 1)
            factor = (c_init + math.log((n_parent + c_base + 1.0) / c_base)) * math.sqrt(n_parent)
            unvisited = _clamp01(minmax._normalize(b, mean_q))
            best = -_INF
            for a, child in enumerate(node.children):
                if legal is not None and not legal[a]:
                    continue
                if child is None:
                    n_child, value_score = 0, unvisited
                else:
                    n_child, value_score = child.visits, _clamp01(minmax._normalize(b, scores[a]))
                scores[a] = node.prior[a] * factor / (n_child + 1.0) + value_score
                if scores[a] > best:
                    best = scores[a]
            threshold = best - _TIE_EPSILON
            candidates = [a for a in range(A) if (legal is None or legal[a]) and scores[a] >= threshold]
            action = candidates[0] if len(candidates) == 1 else candidates[rng.next() % len(candidates)]
            nxt = node.children[action]
            if nxt is None:
                break
            node = nxt
            path.append(node)
            legal = None
            is_root = False
        paths.append(path)
        leaf_actions.append(action)
        parents[b] = node.latent
        actions[b] = action
    results._roots = roots
    results._key = (roots._uid, roots._generation)
    results._pending = True
    results._paths = paths
    results._actions = leaf_actions
    return parents, np.arange(B, dtype=np.int64), actions


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
        leaf = _Node(len(tree), vp[b], reward, resets[b], int(new_index))
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
