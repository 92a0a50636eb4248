"""Search semantics, checked on both trees: a hand-worked search, resets, masks, seeds, min-max reuse."""

import math

import numpy as np
import pytest
from ctree_helpers import GAMMA, run_search

from delayzoo.ctree import ptree

C_INIT, C_BASE = 1.25, 19652


def test_tie_generator_is_splitmix64():
    """Reference outputs of splitmix64 (Vigna's generator) for seeds 0 and 1234567."""
    g = ptree._SplitMix64(0)
    assert [g.next() for _ in range(3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    g = ptree._SplitMix64(1234567)
    assert [g.next() for _ in range(2)] == [6457827717110365317, 3203168211198807973]


def test_hand_worked_two_action_three_simulation_search(tree):
    gamma = 0.9
    roots = tree.Roots(1, 2, 4, seed=0)
    roots.prepare(np.zeros(1), np.log([[3.0, 1.0]]))  # priors 0.75, 0.25
    minmax, results = tree.MinMaxStatsList(1), tree.SearchResults(1)
    draws = ptree._SplitMix64(0)

    def factor(n):
        return (C_INIT + math.log((n + C_BASE + 1) / C_BASE)) * math.sqrt(n)

    # Simulation 1: N = 0, so every prior term is 0 and both children score the root's mean Q:
    # a tie, broken by the first draw of the seeded generator.
    first = [0, 1][draws.next() % 2]
    assert first == 1
    parent, index, action = tree.batch_traverse(roots, C_INIT, C_BASE, gamma, minmax, results)
    assert (parent[0], index[0], action[0]) == (0, 0, first)
    assert results.search_lengths()[0] == 1
    # leaf: value prefix 0.5, value 1 -> Q(root, 1) = 0.5 + 0.9 * 1 = 1.4
    tree.batch_backpropagate(1, gamma, [0.5], [1.0], [[0.0, 0.0]], minmax, results)
    q1 = 0.5 + gamma * 1.0

    # Simulation 2: N = 1. Min-max holds the single value 1.4 (no spread), so Q is used raw
    # and clamped to 1; the unvisited child 0 gets the root's mean Q (1.4), also clamped to 1.
    score0 = 0.75 * factor(1) / 1 + 1.0
    score1 = 0.25 * factor(1) / 2 + 1.0
    assert score0 > score1
    parent, index, action = tree.batch_traverse(roots, C_INIT, C_BASE, gamma, minmax, results)
    assert (parent[0], action[0]) == (0, 0)
    # leaf: value prefix -0.2, value -1 -> Q(root, 0) = -0.2 - 0.9 = -1.1
    tree.batch_backpropagate(2, gamma, [-0.2], [-1.0], [[0.0, 0.0]], minmax, results)
    q0 = -0.2 + gamma * -1.0
    lo, hi = minmax.bounds()
    assert (lo[0], hi[0]) == pytest.approx((q0, q1))

    # Simulation 3: N = 2; normalised Q: child 0 -> 0, child 1 -> 1.
    score0 = 0.75 * factor(2) / 2 + 0.0
    score1 = 0.25 * factor(2) / 2 + 1.0
    assert score1 > score0
    # At child 1 (visited once, N = 0) both grandchildren tie again at the node's mean Q,
    # (root mean Q + nothing) / 1; the second draw picks one.
    second = [0, 1][draws.next() % 2]
    parent, index, action = tree.batch_traverse(roots, C_INIT, C_BASE, gamma, minmax, results)
    assert (parent[0], action[0]) == (1, second)  # parent latent: the one stored at simulation 1
    assert results.search_lengths()[0] == 2
    # leaf: cumulative value prefix 0.8 (edge reward 0.8 - 0.5 = 0.3), value 2
    tree.batch_backpropagate(3, gamma, [0.8], [2.0], [[0.0, 0.0]], minmax, results)

    np.testing.assert_array_equal(roots.distributions(), [[1, 2]])
    child1_backup = 0.3 + gamma * 2.0
    root_backups = [q1, q0, 0.5 + gamma * child1_backup]
    assert roots.values()[0] == pytest.approx(sum(root_backups) / 3)
    q1_after = 0.5 + gamma * (1.0 + child1_backup) / 2
    lo, hi = minmax.bounds()
    assert (lo[0], hi[0]) == pytest.approx((q0, max(q1_after, child1_backup)))


@pytest.mark.parametrize(("reset", "expected"), [(True, (1.0 + 1.25) / 2), (False, (1.0 + 0.75) / 2)])
def test_reset_node_gives_children_their_own_value_prefix_as_reward(tree, reset, expected):
    """A chain root -> c1 (prefix 1, reset after it) -> c2 (prefix 0.5), zero values, discount 0.5."""
    roots = tree.Roots(1, 1, 3, seed=0)
    roots.prepare([0.0], [[0.0]])
    minmax, results = tree.MinMaxStatsList(1), tree.SearchResults(1)
    tree.batch_traverse(roots, C_INIT, C_BASE, 0.5, minmax, results)
    tree.batch_backpropagate(1, 0.5, [1.0], [0.0], [[0.0]], minmax, results, [reset])  # root backup 1
    tree.batch_traverse(roots, C_INIT, C_BASE, 0.5, minmax, results)
    tree.batch_backpropagate(2, 0.5, [0.5], [0.0], [[0.0]], minmax, results, [False])
    # second root backup: 1 + 0.5 * r(c2) with r(c2) = 0.5 after a reset, 0.5 - 1 otherwise
    assert roots.values()[0] == pytest.approx(expected)


def test_illegal_root_actions_are_never_searched(tree):
    record = run_search(tree, batch=6, actions=5, simulations=60, seed=2, mask=True, noise=True)
    legal = record["legal"]
    assert (record["distributions"][~legal] == 0).all()
    assert (record["distributions"].sum(axis=1) == 60).all()
    for _, _, action, lengths, _ in record["steps"]:
        at_root = lengths == 1
        assert legal[np.arange(6)[at_root], action[at_root]].all()


def test_same_seed_gives_the_same_search(tree):
    a = run_search(tree, batch=4, actions=6, simulations=30, seed=9, noise=True, horizon=3)
    b = run_search(tree, batch=4, actions=6, simulations=30, seed=9, noise=True, horizon=3)
    for step_a, step_b in zip(a["steps"], b["steps"]):
        for x, y in zip(step_a, step_b):
            np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(a["distributions"], b["distributions"])
    np.testing.assert_array_equal(a["values"], b["values"])


def _tied_search(tree, seed):
    roots = tree.Roots(8, 4, 11, seed=seed)
    roots.prepare(np.zeros(8), np.zeros((8, 4)))
    minmax, results = tree.MinMaxStatsList(8), tree.SearchResults(8)
    for s in range(1, 11):
        tree.batch_traverse(roots, C_INIT, C_BASE, GAMMA, minmax, results)
        tree.batch_backpropagate(s, GAMMA, np.zeros(8), np.zeros(8), np.zeros((8, 4)), minmax, results)
    return roots.distributions()


def test_seed_drives_the_tie_breaking(tree):
    np.testing.assert_array_equal(_tied_search(tree, 1), _tied_search(tree, 1))
    assert not np.array_equal(_tied_search(tree, 1), _tied_search(tree, 2))


def test_minmax_statistics_are_those_of_the_tree_it_is_used_with(tree):
    """Reusing one MinMaxStatsList across searches, or swapping it mid-search, changes nothing."""
    rng = np.random.default_rng(4)
    outputs = [(rng.normal(size=3), rng.normal(size=3), rng.normal(size=(3, 4))) for _ in range(20)]
    logits = rng.normal(size=(3, 4))

    def search(fresh_each_step):
        roots = tree.Roots(3, 4, 21, seed=4)
        roots.prepare(np.zeros(3), logits)
        minmax, results = tree.MinMaxStatsList(3), tree.SearchResults(3)
        for s, (vp, value, pl) in enumerate(outputs, start=1):
            if fresh_each_step:
                minmax = tree.MinMaxStatsList(3)
            tree.batch_traverse(roots, C_INIT, C_BASE, GAMMA, minmax, results)
            tree.batch_backpropagate(s, GAMMA, vp, value, pl, minmax, results)
        return roots, minmax

    reference, reused = search(False)
    np.testing.assert_array_equal(search(True)[0].distributions(), reference.distributions())
    # a second search with the same minmax object starts from an empty range again
    reference.prepare(np.zeros(3), logits)
    results = tree.SearchResults(3)
    tree.batch_traverse(reference, C_INIT, C_BASE, GAMMA, reused, results)
    lo, hi = reused.bounds()
    assert np.isinf(lo).all() and np.isinf(hi).all()


def test_roots_can_be_reused_for_a_new_search(tree):
    rng = np.random.default_rng(6)
    logits = rng.normal(size=(2, 3))
    outputs = [(rng.normal(size=2), rng.normal(size=2), rng.normal(size=(2, 3))) for _ in range(8)]
    roots = tree.Roots(2, 3, 9, seed=0)
    visits = []
    for _ in range(2):
        roots.prepare(np.zeros(2), logits)
        minmax, results = tree.MinMaxStatsList(2), tree.SearchResults(2)
        for s, (vp, value, pl) in enumerate(outputs, start=1):
            tree.batch_traverse(roots, C_INIT, C_BASE, GAMMA, minmax, results)
            tree.batch_backpropagate(s, GAMMA, vp, value, pl, minmax, results)
        visits.append(roots.distributions())
        assert roots.num_nodes == 9
    assert visits[0].sum() == visits[1].sum() == 16
