"""Bad input raises a ValueError (or TypeError) that names the bad value, in both trees."""

import numpy as np
import pytest

B, A = 3, 4


def prepared(tree, max_nodes=5):
    roots = tree.Roots(B, A, max_nodes, seed=0)
    roots.prepare(np.zeros(B), np.zeros((B, A)))
    return roots, tree.MinMaxStatsList(B), tree.SearchResults(B)


def traversed(tree, max_nodes=5):
    roots, minmax, results = prepared(tree, max_nodes)
    tree.batch_traverse(roots, 1.25, 19652, 0.99, minmax, results)
    return roots, minmax, results


def backprop(tree, minmax, results, new_index=1, value_prefix=None, value=None, logits=None, is_reset=None):
    tree.batch_backpropagate(
        new_index,
        0.99,
        np.zeros(B) if value_prefix is None else value_prefix,
        np.zeros(B) if value is None else value,
        np.zeros((B, A)) if logits is None else logits,
        minmax,
        results,
        is_reset,
    )


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, A, 5), "num_roots"),
        ((-2, A, 5), "num_roots"),
        ((B, 0, 5), "num_actions"),
        ((B, A, 0), "max_nodes"),
        ((B, A, -50), "max_nodes"),
    ],
)
def test_non_positive_sizes_are_rejected(tree, args, match):
    with pytest.raises(ValueError, match=match):
        tree.Roots(*args)


def test_bad_seed_and_size_types_are_rejected(tree):
    with pytest.raises(ValueError, match="seed"):
        tree.Roots(B, A, 5, seed=-1)
    with pytest.raises(TypeError, match="seed"):
        tree.Roots(B, A, 5, seed=1.5)
    with pytest.raises(TypeError, match="max_nodes"):
        tree.Roots(B, A, 5.0)
    with pytest.raises(ValueError, match="num_roots"):
        tree.MinMaxStatsList(0)
    with pytest.raises(ValueError, match="num_roots"):
        tree.SearchResults(-1)
    with pytest.raises(ValueError, match="value_delta_max"):
        tree.MinMaxStatsList(B, value_delta_max=0.0)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(value_prefix=np.zeros(B + 1)), r"value_prefix must have shape \(3,\)"),
        (dict(policy_logits=np.zeros((B, A + 1))), r"policy_logits must have shape \(3, 4\)"),
        (dict(policy_logits=np.zeros(B * A)), "policy_logits must have shape"),
        (dict(noise=np.zeros((A, B))), "noise must have shape"),
        (dict(legal_mask=np.ones(A, dtype=bool)), "legal_mask must have shape"),
        (dict(value_prefix=[0.0, np.nan, 0.0]), r"value_prefix\[1\] is nan"),
        (dict(policy_logits=np.where(np.eye(B, A) > 0, np.inf, 0.0)), r"policy_logits\[0, 0\] is inf"),
        (dict(policy_logits=np.full((B, A), -np.inf)), r"policy_logits\[0, 0\] is -inf"),
        (dict(noise=np.full((B, A), np.nan)), r"noise\[0, 0\] is nan"),
        (dict(noise_fraction=1.5), "noise_fraction"),
        (dict(legal_mask=np.array([[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]]) > 0), r"legal_mask\[1\] has no legal"),
    ],
)
def test_prepare_rejects_bad_input(tree, kwargs, match):
    roots = tree.Roots(B, A, 5)
    args = dict(value_prefix=np.zeros(B), policy_logits=np.zeros((B, A)))
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        roots.prepare(**args)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(value_prefix=np.zeros(B - 1)), "value_prefix must have shape"),
        (dict(value=np.zeros((B, 1))), "value must have shape"),
        (dict(logits=np.zeros((B, A, 1))), "policy_logits must have shape"),
        (dict(is_reset=np.zeros(B + 2, dtype=bool)), "is_reset must have shape"),
        (dict(value=[0.0, 0.0, np.inf]), r"value\[2\] is inf"),
        (dict(value_prefix=[np.nan, 0.0, 0.0]), r"value_prefix\[0\] is nan"),
        (dict(logits=np.where(np.eye(B, A)[::-1] > 0, np.nan, 0.0)), r"policy_logits\[0, 2\] is nan"),
        (dict(new_index=0), "new_index"),
        (dict(new_index=-3), "new_index"),
    ],
)
def test_backpropagate_rejects_bad_input(tree, kwargs, match):
    roots, minmax, results = traversed(tree)
    with pytest.raises(ValueError, match=match):
        backprop(tree, minmax, results, **kwargs)
    backprop(tree, minmax, results)  # the tree is untouched: the same leaf can still be expanded
    np.testing.assert_array_equal(roots.distributions().sum(axis=1), np.ones(B))


def test_traverse_rejects_bad_constants(tree):
    roots, minmax, results = prepared(tree)
    for c_init, c_base, discount, match in [
        (np.nan, 19652, 0.99, "c_init"),
        (1.25, 0.0, 0.99, "c_base"),
        (1.25, -1.0, 0.99, "c_base"),
        (1.25, 19652, 1.5, "discount"),
        (1.25, 19652, np.nan, "discount"),
    ]:
        with pytest.raises(ValueError, match=match):
            tree.batch_traverse(roots, c_init, c_base, discount, minmax, results)


def test_calls_out_of_order_are_rejected(tree):
    roots = tree.Roots(B, A, 5)
    minmax, results = tree.MinMaxStatsList(B), tree.SearchResults(B)
    with pytest.raises(ValueError, match="prepare"):
        tree.batch_traverse(roots, 1.25, 19652, 0.99, minmax, results)
    with pytest.raises(ValueError, match="batch_traverse"):
        backprop(tree, minmax, results)
    roots, minmax, results = traversed(tree)
    backprop(tree, minmax, results)
    with pytest.raises(ValueError, match="batch_traverse"):
        backprop(tree, minmax, results, new_index=2)  # a second backup of the same traversal
    tree.batch_traverse(roots, 1.25, 19652, 0.99, minmax, results)
    roots.prepare(np.zeros(B), np.zeros((B, A)))  # a new search invalidates the pending traversal
    with pytest.raises(ValueError, match="batch_traverse"):
        backprop(tree, minmax, results, new_index=2)


def test_mismatched_batch_sizes_are_rejected(tree):
    roots, _, _ = prepared(tree)
    with pytest.raises(ValueError, match="minmax has 2 roots"):
        tree.batch_traverse(roots, 1.25, 19652, 0.99, tree.MinMaxStatsList(2), tree.SearchResults(B))
    with pytest.raises(ValueError, match="results has 5 roots"):
        tree.batch_traverse(roots, 1.25, 19652, 0.99, tree.MinMaxStatsList(B), tree.SearchResults(5))


def test_full_node_pool_is_rejected(tree):
    roots, minmax, results = prepared(tree, max_nodes=3)
    for s in (1, 2):
        tree.batch_traverse(roots, 1.25, 19652, 0.99, minmax, results)
        backprop(tree, minmax, results, new_index=s)
    with pytest.raises(ValueError, match="max_nodes=3 allows 2 simulations"):
        tree.batch_traverse(roots, 1.25, 19652, 0.99, minmax, results)


def test_wrong_object_types_are_rejected(tree):
    roots, minmax, results = prepared(tree)
    with pytest.raises(TypeError):
        tree.batch_traverse(None, 1.25, 19652, 0.99, minmax, results)
    with pytest.raises(TypeError):
        tree.batch_traverse(roots, 1.25, 19652, 0.99, results, minmax)
    tree.batch_traverse(roots, 1.25, 19652, 0.99, minmax, results)
    with pytest.raises(TypeError, match="new_index"):
        backprop(tree, minmax, results, new_index=1.0)
    with pytest.raises(TypeError):
        backprop(tree, None, results)
