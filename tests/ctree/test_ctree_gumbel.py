"""Gumbel MuZero's search in both trees: the halving schedule, what an exact model makes it choose, the improved
policy, per-node normalisation, and the errors."""

import numpy as np
import pytest
from ctree_helpers import C_SCALE, C_VISIT, GAMMA, TREES

from delayzoo.ctree import _ctree, ptree


def bandit_search(tree, rewards, logits, simulations, num_considered, gumbel=None, q_normalization="tree"):
    """A search of one root over an exact model: root action ``a`` earns ``rewards[a]``, nothing else earns or
    is worth anything, so Q(root, a) = rewards[a]. Returns the visits, the selected action and the policy."""
    rewards, logits = np.asarray(rewards, dtype=np.float64), np.asarray(logits, dtype=np.float64)
    actions = len(rewards)
    roots = tree.Roots(1, actions, simulations + 1, seed=3)
    noise = np.zeros((1, actions)) if gumbel is None else np.asarray(gumbel, dtype=np.float64)[None]
    roots.prepare(np.zeros(1), logits[None], values=np.zeros(1), gumbel=noise, num_considered=num_considered)
    minmax, results = tree.MinMaxStatsList(1, q_normalization=q_normalization), tree.SearchResults(1)
    root_action = {0: -1}  # simulation index of a node -> the root action above it
    for s in range(1, simulations + 1):
        parent, _, action = tree.batch_traverse_gumbel(roots, C_VISIT, C_SCALE, GAMMA, minmax, results)
        first = int(action[0]) if parent[0] == 0 else root_action[int(parent[0])]
        root_action[s] = first
        prefix = np.array([rewards[first]])  # constant below the first edge: later edges earn 0
        tree.batch_backpropagate(s, GAMMA, prefix, np.zeros(1), np.zeros((1, actions)), minmax, results)
    chosen, policy = tree.gumbel_outputs(roots, C_VISIT, C_SCALE, GAMMA, minmax)
    return roots.distributions()[0], int(chosen[0]), policy[0]


@pytest.mark.parametrize(
    ("num_considered", "simulations", "expected"),
    [
        (2, 5, [0, 0, 1, 1, 2]),
        (4, 16, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]),
        (3, 8, [0, 0, 0, 1, 1, 2, 2, 3]),
        (1, 4, [0, 1, 2, 3]),
        (16, 16, [0] * 16),
    ],
)
def test_halving_schedule_by_hand(num_considered, simulations, expected):
    for tree in TREES.values():
        np.testing.assert_array_equal(tree.halving_schedule(num_considered, simulations), expected)


def test_halving_schedule_spends_exactly_the_budget_in_both_trees():
    for m in range(1, 20):
        for simulations in range(0, 80, 3):
            c, p = _ctree.halving_schedule(m, simulations), ptree.halving_schedule(m, simulations)
            np.testing.assert_array_equal(c, p)
            assert len(c) == simulations
            assert (np.diff(c) >= 0).all()


@pytest.mark.parametrize("q_normalization", ["tree", "parent_siblings"])
def test_an_exact_bandit_keeps_the_schedules_survivors(tree, q_normalization):
    """8 actions, all considered, 32 simulations: 8 visited once, the best 4 to 3 visits, the best 2 to 11."""
    rewards = np.array([0.3, 0.8, 0.1, 0.5, 0.7, 0.2, 0.6, 0.4])
    visits, chosen, _ = bandit_search(tree, rewards, np.zeros(8), 32, 8, q_normalization=q_normalization)
    by_rank = visits[np.argsort(-rewards)]
    np.testing.assert_array_equal(by_rank, [11, 11, 3, 3, 1, 1, 1, 1])
    assert visits.sum() == 32
    assert chosen == int(np.argmax(rewards))


@pytest.mark.parametrize("q_normalization", ["tree", "parent_siblings"])
@pytest.mark.parametrize("actions", [2, 3, 6])
def test_uniform_prior_no_noise_and_an_exact_model_select_the_best_q(tree, actions, q_normalization):
    rng = np.random.default_rng(actions)
    for _ in range(5):
        rewards = rng.permutation(actions) / actions + 0.05
        visits, chosen, policy = bandit_search(
            tree, rewards, np.zeros(actions), 16, 16, q_normalization=q_normalization
        )
        assert chosen == int(np.argmax(rewards))
        assert int(np.argmax(policy)) == int(np.argmax(rewards))
        assert visits.sum() == 16


def test_the_improved_policy_moves_mass_to_the_higher_q(tree):
    """A confident prior on the worse action: pUCT's visits would copy it; the improved policy does not."""
    logits = np.array([2.0, 0.0])
    prior = np.exp(logits) / np.exp(logits).sum()
    _, chosen, policy = bandit_search(tree, [0.0, 1.0], logits, 16, 16)
    assert policy[1] > prior[1]
    assert policy.sum() == pytest.approx(1.0)
    assert chosen == 1


def test_gumbel_noise_samples_the_considered_actions(tree):
    """With one considered action, the search spends everything on the top of g + logits and selects it."""
    gumbel = np.array([0.0, 3.0, 0.5, 1.0])
    visits, chosen, _ = bandit_search(tree, [0.9, 0.1, 0.5, 0.2], np.zeros(4), 10, 1, gumbel=gumbel)
    np.testing.assert_array_equal(visits, [0, 10, 0, 0])
    assert chosen == 1


def test_illegal_root_actions_are_never_searched_nor_given_mass(tree):
    roots = tree.Roots(2, 4, 17, seed=0)
    legal = np.array([[True, False, True, False], [False, False, False, True]])
    rng = np.random.default_rng(0)
    roots.prepare(np.zeros(2), rng.normal(size=(2, 4)), None, 0.25, legal, gumbel=rng.gumbel(size=(2, 4)))
    minmax, results = tree.MinMaxStatsList(2), tree.SearchResults(2)
    for s in range(1, 17):
        tree.batch_traverse_gumbel(roots, C_VISIT, C_SCALE, GAMMA, minmax, results)
        outputs = rng.normal(size=2), rng.normal(size=2), rng.normal(size=(2, 4))
        tree.batch_backpropagate(s, GAMMA, *outputs, minmax, results)
    actions, policy = tree.gumbel_outputs(roots, C_VISIT, C_SCALE, GAMMA, minmax)
    visits = roots.distributions()
    assert (visits[~legal] == 0).all() and (policy[~legal] == 0).all()
    np.testing.assert_array_equal(visits[1], [0, 0, 0, 16])
    assert legal[np.arange(2), actions].all()
    np.testing.assert_allclose(policy.sum(axis=1), 1.0)


def test_per_node_normalisation_keeps_no_tree_statistics(tree):
    roots = tree.Roots(1, 2, 5, seed=0)
    roots.prepare(np.zeros(1), np.zeros((1, 2)))
    minmax, results = tree.MinMaxStatsList(1, q_normalization="parent_siblings"), tree.SearchResults(1)
    for s in range(1, 5):
        tree.batch_traverse(roots, 1.25, 19652, GAMMA, minmax, results)
        tree.batch_backpropagate(s, GAMMA, np.ones(1) * s, np.ones(1), np.zeros((1, 2)), minmax, results)
    assert minmax.q_normalization == "parent_siblings"
    lo, hi = minmax.bounds()
    assert lo[0] == np.inf and hi[0] == -np.inf
    assert roots.distributions().sum() == 4


def test_gumbel_errors_name_the_problem(tree):
    roots = tree.Roots(1, 2, 5)
    with pytest.raises(ValueError, match="noise or gumbel, not both"):
        roots.prepare(np.zeros(1), np.zeros((1, 2)), np.ones((1, 2)) / 2, 0.25, gumbel=np.zeros((1, 2)))
    with pytest.raises(ValueError, match="num_considered"):
        roots.prepare(np.zeros(1), np.zeros((1, 2)), gumbel=np.zeros((1, 2)), num_considered=0)
    with pytest.raises(ValueError, match="gumbel"):
        roots.prepare(np.zeros(1), np.zeros((1, 2)), gumbel=np.array([[0.0, np.nan]]))
    with pytest.raises(ValueError, match="q_normalization"):
        tree.MinMaxStatsList(1, q_normalization="whole")
    minmax, results = tree.MinMaxStatsList(1), tree.SearchResults(1)
    roots.prepare(np.zeros(1), np.zeros((1, 2)))
    with pytest.raises(ValueError, match="use batch_traverse \\(pUCT\\)"):
        tree.batch_traverse_gumbel(roots, C_VISIT, C_SCALE, GAMMA, minmax, results)
    with pytest.raises(ValueError, match="gumbel_outputs needs roots prepared with gumbel"):
        tree.gumbel_outputs(roots, C_VISIT, C_SCALE, GAMMA, minmax)
    roots.prepare(np.zeros(1), np.zeros((1, 2)), gumbel=np.zeros((1, 2)))
    with pytest.raises(ValueError, match="use batch_traverse_gumbel"):
        tree.batch_traverse(roots, 1.25, 19652, GAMMA, minmax, results)
    with pytest.raises(ValueError, match="c_visit"):
        tree.batch_traverse_gumbel(roots, -1.0, C_SCALE, GAMMA, minmax, results)
    with pytest.raises(ValueError, match="c_scale"):
        tree.gumbel_outputs(roots, C_VISIT, float("inf"), GAMMA, minmax)
