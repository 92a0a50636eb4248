"""ctree and ptree build the same trees (pUCT and Gumbel, both normalisations); the min-max statistics equal a
whole-tree rebuild."""

import itertools

import numpy as np
import pytest
from ctree_helpers import GAMMA, run_search

from delayzoo.ctree import _ctree, ptree

CONFIGS = list(
    itertools.product(
        [1, 3, 8],  # batch
        [1, 2, 5, 18],  # actions
        [(False, False, 0), (True, False, 5), (False, True, 3), (True, True, 2)],  # noise, mask, horizon
    )
)
SEARCHES = [("puct", "tree"), ("puct", "parent_siblings"), ("gumbel", "tree"), ("gumbel", "parent_siblings")]


@pytest.mark.parametrize(("method", "q_normalization"), SEARCHES)
@pytest.mark.parametrize(("batch", "actions", "options"), CONFIGS)
def test_ctree_matches_ptree_on_random_trees(batch, actions, options, method, q_normalization):
    noise, mask, horizon = options
    for seed in range(6):
        simulations = [1, 7, 25, 40, 3, 60][seed]
        kwargs = dict(
            batch=batch, actions=actions, simulations=simulations, seed=seed, noise=noise, mask=mask,
            horizon=horizon, root_prefix=seed % 2 == 1, method=method, q_normalization=q_normalization,
            num_considered=[16, 4, 2, 16, 3, 1][seed],
        )
        c, p = run_search(_ctree, **kwargs), run_search(ptree, **kwargs)
        if method == "gumbel":
            np.testing.assert_array_equal(c["actions"], p["actions"])
            np.testing.assert_array_equal(c["policy"], p["policy"])
        for step_c, step_p in zip(c["steps"], p["steps"]):
            for x, y in zip(step_c, step_p):
                np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(c["distributions"], p["distributions"])
        np.testing.assert_allclose(c["values"], p["values"], rtol=1e-12, atol=1e-12)
        for (lo_c, hi_c), (lo_p, hi_p) in zip(c["bounds"], p["bounds"]):
            np.testing.assert_allclose(lo_c, lo_p, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(hi_c, hi_p, rtol=1e-12, atol=1e-12)
        assert c["distributions"].sum() == batch * simulations


def test_searches_with_many_ties_match():
    """Equal logits make every first choice a tie: both trees draw the same actions."""
    batch, actions = 6, 4
    searches = []
    for module in (_ctree, ptree):
        roots = module.Roots(batch, actions, 31, seed=11)
        roots.prepare(np.zeros(batch), np.zeros((batch, actions)))
        minmax, results = module.MinMaxStatsList(batch), module.SearchResults(batch)
        chosen = []
        for s in range(1, 31):
            chosen.append(module.batch_traverse(roots, 1.25, 19652, GAMMA, minmax, results)[2])
            module.batch_backpropagate(
                s, GAMMA, np.zeros(batch), np.zeros(batch), np.zeros((batch, actions)), minmax, results
            )
        searches.append((np.array(chosen), roots.distributions()))
    np.testing.assert_array_equal(searches[0][0], searches[1][0])
    np.testing.assert_array_equal(searches[0][1], searches[1][1])
    assert len(np.unique(searches[0][0][0])) > 1  # the first choices really were random


def test_traverse_reports_leaf_depth_and_parent_latent_index(tree):
    record = run_search(tree, batch=5, actions=3, simulations=30, seed=3)
    for parent, index, _, lengths, depths in record["steps"]:
        np.testing.assert_array_equal(index, np.arange(5))
        np.testing.assert_array_equal(lengths, depths)
        assert (parent >= 0).all()
    assert max(step[3].max() for step in record["steps"]) > 1  # the search went deeper than the roots


def test_float32_inputs_are_used_at_their_exact_values(tree):
    kwargs = dict(batch=4, actions=5, simulations=20, seed=5, noise=True)
    single = run_search(tree, cast=lambda x: np.asarray(x, dtype=np.float32), **kwargs)
    double = run_search(tree, cast=lambda x: np.asarray(x, dtype=np.float32).astype(np.float64), **kwargs)
    np.testing.assert_array_equal(single["distributions"], double["distributions"])
    np.testing.assert_array_equal(single["values"], double["values"])


def _rebuilt_bounds(roots: ptree.Roots, discount: float) -> tuple[np.ndarray, np.ndarray]:
    """What EfficientZero's update_tree_q computes: min/max of Q over every visited edge of the tree."""
    lows, highs = [], []
    for tree in roots._trees:
        qs = []
        for node in tree:
            for child in node.children:
                if child is not None:
                    reward = child.value_prefix if node.is_reset else child.value_prefix - node.value_prefix
                    qs.append(reward + discount * (child.value_sum / child.visits))
        lows.append(min(qs, default=np.inf))
        highs.append(max(qs, default=-np.inf))
    return np.array(lows), np.array(highs)


@pytest.mark.parametrize("horizon", [0, 2])
def test_path_only_minmax_equals_whole_tree_rebuild_after_every_backup(horizon):
    batch, actions, simulations = 4, 3, 40
    rng = np.random.default_rng(0)
    roots = ptree.Roots(batch, actions, simulations + 1, seed=0)
    roots.prepare(rng.normal(size=batch), rng.normal(size=(batch, actions)))
    minmax, results = ptree.MinMaxStatsList(batch), ptree.SearchResults(batch)
    shrank = False
    previous = None
    for s in range(1, simulations + 1):
        ptree.batch_traverse(roots, 1.25, 19652, GAMMA, minmax, results)
        is_reset = results.search_lengths() % horizon == 0 if horizon else None
        ptree.batch_backpropagate(
            s, GAMMA, rng.normal(size=batch), rng.normal(size=batch) * 3, rng.normal(size=(batch, actions)),
            minmax, results, is_reset,
        )
        lo, hi = minmax.bounds()
        rebuilt_lo, rebuilt_hi = _rebuilt_bounds(roots, GAMMA)
        np.testing.assert_array_equal(lo, rebuilt_lo)
        np.testing.assert_array_equal(hi, rebuilt_hi)
        if previous is not None:
            shrank = shrank or bool((hi < previous[1]).any() or (lo > previous[0]).any())
        previous = (lo, hi)
    assert shrank  # the range does shrink when an extreme Q moves inward: not a running min/max
