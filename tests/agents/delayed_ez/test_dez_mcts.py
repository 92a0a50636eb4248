from types import SimpleNamespace

import numpy as np
import pytest
import torch
from plain_reference import PlainNetwork

import delayzoo.ctree
from delayzoo.agents.delayed_ez.config import SearchConfig
from delayzoo.agents.delayed_ez.mcts import MCTS
from delayzoo.agents.delayed_ez.networks import RecurrentOutput
from delayzoo.ctree import ptree


class ChainNet:
    """One action: the tree is a chain. latent = depth; the LSTM state counts steps since its last reset.

    Records the (parent depth, incoming LSTM state) of every recurrent call.
    """

    def __init__(self, nan_at_depth: int | None = None, bad_latent: float | None = None) -> None:
        self.calls: list[tuple[int, int]] = []
        self.nan_at_depth = nan_at_depth
        self.bad_latent = bad_latent

    def initial_lstm_state(self, batch: int):
        return torch.zeros(1, batch, 1), torch.zeros(1, batch, 1)

    def to_scalar(self, logits: torch.Tensor) -> torch.Tensor:
        return logits[..., 0]

    def recurrent_inference(self, latent, lstm_state, action):
        h, c = lstm_state
        for depth, count in zip(latent[:, 0].tolist(), h[0, :, 0].tolist()):
            self.calls.append((int(depth), int(count)))
        depth = latent + 1
        if self.bad_latent is not None and (depth[:, 0] == 2).any():
            depth = depth.clone()
            depth[:, -1] = self.bad_latent  # the values stay finite: only the latent check can see it
        value = torch.zeros(latent.shape[0], 1)
        if self.nan_at_depth is not None and (depth[:, 0] == self.nan_at_depth).any():
            value[:] = float("nan")
        policy = torch.zeros(latent.shape[0], 1)
        return RecurrentOutput(depth, (h + 1, c + 1), torch.zeros(latent.shape[0], 1), value, policy)


@pytest.mark.parametrize("horizon", [1, 3, 5])
def test_value_prefix_lstm_resets_below_depths_multiple_of_horizon(horizon):
    net = ChainNet()
    MCTS(1, SearchConfig(num_simulations=12, lstm_horizon=horizon)).search(
        net, torch.zeros(2, 1), torch.zeros(2, 1), np.random.default_rng(0), add_noise=False
    )
    assert sorted({d for d, _ in net.calls}) == list(range(12))
    for parent_depth, steps_since_reset in net.calls:
        assert steps_since_reset == parent_depth % horizon


def test_non_finite_model_output_raises():
    with pytest.raises(ValueError, match="non-finite value.*simulation 3"):
        MCTS(1, SearchConfig(num_simulations=5)).search(
            ChainNet(nan_at_depth=3), torch.zeros(1, 1), torch.zeros(1, 1), np.random.default_rng(0), False
        )
    with pytest.raises(ValueError, match="non-finite root policy logits"):
        MCTS(1, SearchConfig(num_simulations=5)).search(
            ChainNet(), torch.zeros(1, 1), torch.full((1, 1), float("inf")), np.random.default_rng(0), False
        )


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), 3e38])
def test_non_finite_or_overflowing_latents_raise(bad):
    """Latents carry a second column that the chain's values ignore; a bad one must still stop the search."""
    with pytest.raises(ValueError, match="non-finite or overflowing latents"):
        MCTS(1, SearchConfig(num_simulations=5)).search(
            ChainNet(bad_latent=bad), torch.zeros(1, 2), torch.zeros(1, 1), np.random.default_rng(0), False
        )
    MCTS(1, SearchConfig(num_simulations=5)).search(  # large but finite latents whose sum fits pass
        ChainNet(bad_latent=1e30), torch.zeros(1, 2), torch.zeros(1, 1), np.random.default_rng(0), False
    )


class PathNet:
    """Latent = (root id, path code); a child's code appends its action. Records every expansion."""

    num_actions = 3

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def initial_lstm_state(self, batch: int):
        return torch.zeros(1, batch, 1), torch.zeros(1, batch, 1)

    def to_scalar(self, logits: torch.Tensor) -> torch.Tensor:
        return logits[..., 0]

    def recurrent_inference(self, latent, lstm_state, action):
        for (root_id, code), a in zip(latent.long().tolist(), action.tolist()):
            self.calls.append((root_id, code, a))
        child = latent.clone()
        child[:, 1] = latent[:, 1] * 4 + action.double() + 1
        value = torch.sin(child[:, 1:2] * 0.37 + child[:, 0:1])
        policy = torch.stack([torch.cos(child[:, 1] * k) for k in (0.3, 0.7, 1.1)], dim=1)
        return RecurrentOutput(child, lstm_state, value * 0.1, value, policy)


@pytest.mark.parametrize("tree", [delayzoo.ctree, ptree], ids=["default", "ptree"])
def test_batched_search_expands_each_root_from_its_own_nodes(tree):
    net = PathNet()
    roots = torch.tensor([[0, 0], [1, 0], [2, 0], [3, 0]], dtype=torch.float64)
    logits = torch.tensor([[1.0, 0.0, -1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 2.0], [0.5, 0.5, 0.0]])
    out = MCTS(3, SearchConfig(num_simulations=20), tree=tree).search(
        net, roots, logits, np.random.default_rng(0), False
    )
    assert out.visits.shape == (4, 3) and (out.visits.sum(1) == 20).all()
    assert len(net.calls) == 4 * 20
    expanded = {b: {0} for b in range(4)}
    for root_id, code, action in net.calls:
        assert code in expanded[root_id]  # the parent is the root or a node expanded earlier in this tree
        child = code * 4 + action + 1
        assert child not in expanded[root_id]  # every simulation expands a new node
        expanded[root_id].add(child)
    for b in range(4):  # root visits = visits of the subtrees under each first action
        first_actions = [0] * 3
        for code in expanded[b] - {0}:
            while code > 4:
                code = (code - 1) // 4
            first_actions[code - 1] += 1
        np.testing.assert_array_equal(first_actions, out.visits[b])


def test_dirichlet_noise_only_when_asked():
    prepared = []

    class SpyRoots(ptree.Roots):
        def prepare(self, value_prefix, policy_logits, noise=None, noise_fraction=0.25, *args):
            prepared.append((noise, noise_fraction))
            return super().prepare(value_prefix, policy_logits, noise, noise_fraction, *args)

    names = ("MinMaxStatsList", "SearchResults", "batch_traverse", "batch_backpropagate")
    spy = SimpleNamespace(**{name: getattr(ptree, name) for name in names}, Roots=SpyRoots)
    mcts = MCTS(3, SearchConfig(num_simulations=4, exploration_fraction=0.25), tree=spy)
    roots = torch.zeros(5, 2, dtype=torch.float64)
    mcts.search(PathNet(), roots, torch.zeros(5, 3), np.random.default_rng(0), add_noise=False)
    mcts.search(PathNet(), roots, torch.zeros(5, 3), np.random.default_rng(0), add_noise=True)
    assert prepared[0][0] is None
    noise, fraction = prepared[1]
    assert noise.shape == (5, 3) and fraction == 0.25
    np.testing.assert_allclose(noise.sum(1), 1.0)
    assert (noise >= 0).all() and len({tuple(row) for row in noise}) == 5


def test_search_arguments_are_checked():
    with pytest.raises(ValueError, match="num_simulations"):
        SearchConfig(num_simulations=0)
    with pytest.raises(ValueError, match="lstm_horizon"):
        SearchConfig(lstm_horizon=0)
    with pytest.raises(TypeError, match="pb_c_base"):
        SearchConfig(pb_c_base="big")
    with pytest.raises(ValueError, match="num_actions"):
        MCTS(0)


def _plain_search(mcts: MCTS, network, root_latent, root_logits, rng, add_noise):
    """The search written plainly (per-root scattered writes, per-simulation copies): the reference for the driver."""
    config, batch = mcts.config, root_latent.shape[0]
    noise = rng.dirichlet([config.dirichlet_alpha] * mcts.num_actions, size=batch) if add_noise else None
    roots = delayzoo.ctree.Roots(batch, mcts.num_actions, config.num_simulations + 1, int(rng.integers(2**31 - 1)))
    roots.prepare(np.zeros(batch), root_logits.double().numpy(), noise, config.exploration_fraction)
    minmax, results = delayzoo.ctree.MinMaxStatsList(batch), delayzoo.ctree.SearchResults(batch)
    latents = {(0, b): root_latent[b] for b in range(batch)}
    states = {(0, b): (torch.zeros(network.config.lstm_hidden_size),) * 2 for b in range(batch)}
    depth = {(0, b): 0 for b in range(batch)}
    for sim in range(1, config.num_simulations + 1):
        parents, index, actions = delayzoo.ctree.batch_traverse(
            roots, config.pb_c_init, config.pb_c_base, config.discount, minmax, results
        )
        keys = [(int(p), int(b)) for p, b in zip(parents, index)]
        h = torch.stack([states[k][0] for k in keys]).unsqueeze(0)
        c = torch.stack([states[k][1] for k in keys]).unsqueeze(0)
        out = network.recurrent_inference(torch.stack([latents[k] for k in keys]), (h, c), torch.as_tensor(actions))
        reset = []
        for b, key in enumerate(keys):
            depth[(sim, b)] = depth[key] + 1
            reset.append(depth[(sim, b)] % config.lstm_horizon == 0)
            latents[(sim, b)] = out.latent[b]
            keep = 0.0 if reset[-1] else 1.0
            states[(sim, b)] = (out.lstm_state[0][0, b] * keep, out.lstm_state[1][0, b] * keep)
        delayzoo.ctree.batch_backpropagate(
            sim, config.discount, network.to_scalar(out.value_prefix_logits).double().numpy(),
            network.to_scalar(out.value_logits).double().numpy(), out.policy_logits.double().numpy(), minmax, results,
            np.array(reset),
        )
    return np.asarray(roots.distributions()), np.asarray(roots.values())


@pytest.mark.parametrize("batch", [1, 6, 40])
@pytest.mark.parametrize("add_noise", [False, True])
def test_driver_gives_the_visit_counts_of_the_plain_search(add_noise, batch):
    """The optimised search over the optimised network (inference mode, flat node rows, lean layers, LSTM-cell
    kernel) gives exactly the visits and root values of a plainly written search over the plain torch modules."""
    from delayzoo.agents.delayed_ez.networks import build_network

    torch.manual_seed(0)
    net = build_network((4,), 3, False, latent_dim=8, hidden=(16,), head_hidden=(8,), lstm_hidden_size=8,
                        proj_hidden=8, proj_out=8, pred_hidden=4, support_size=10).eval()
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)  # non-zero heads: values and priors differ
        root = net.initial_inference(torch.randn(batch, 4))
        mcts = MCTS(3, SearchConfig(num_simulations=25, lstm_horizon=3))
        fast = mcts.search(net, root.latent, root.policy_logits, np.random.default_rng(5), add_noise)
        plain_visits, plain_values = _plain_search(
            mcts, PlainNetwork(net), root.latent, root.policy_logits, np.random.default_rng(5), add_noise
        )
    np.testing.assert_array_equal(fast.visits, plain_visits)
    np.testing.assert_array_equal(fast.root_values, plain_values)
    assert batch == 1 or len({tuple(row) for row in fast.visits}) > 1


def test_the_search_can_start_from_a_given_value_prefix_lstm_state():
    net, horizon = ChainNet(), 5
    state = (torch.full((1, 2, 1), 2.0), torch.full((1, 2, 1), 2.0))
    MCTS(1, SearchConfig(num_simulations=12, lstm_horizon=horizon)).search(
        net, torch.zeros(2, 1), torch.zeros(2, 1), np.random.default_rng(0), False, root_lstm_state=state
    )
    for parent_depth, steps in net.calls:  # the roots' state counts as 2 steps, until the first reset
        assert steps == (parent_depth + 2 if parent_depth < horizon else parent_depth % horizon)
