"""DelayedEZ with Gumbel MuZero's search: the configuration, what the search chooses and stores, save and load."""

import numpy as np
import pytest
import torch
from gymnasium import spaces

import delayzoo.ctree
from delayzoo.agents.delayed_ez.config import SearchConfig
from delayzoo.agents.delayed_ez.delayed_ez import DelayedEZ
from delayzoo.agents.delayed_ez.mcts import MCTS
from delayzoo.agents.delayed_ez.networks import RecurrentOutput
from delayzoo.agents.delayed_ez.policies import MlpPolicy
from delayzoo.agents.delayed_ez.reanalysis import compute_targets
from delayzoo.ctree import ptree

FAST = dict(learning_starts=16, batch_size=4, num_simulations=4, replay_buffer_kwargs=dict(segment_length=8),
            lr_warmup_steps=10,
            reanalyze_ratio=1.0, target_update_interval=5, seed=0)
GUMBEL = dict(method="gumbel", num_considered_actions=4, gumbel_scale=0.5, c_visit=30.0, c_scale=0.2,
              q_normalization="parent_siblings")


class BanditNet:
    """An exact model: the first action ``a`` from a root earns ``rewards[a]``; later steps earn and are worth 0.

    Latents are ``[first action + 1]`` (0 at the roots); ``to_scalar`` reads the first logit.
    """

    def __init__(self, rewards) -> None:
        self.rewards = torch.as_tensor(rewards, dtype=torch.float64)

    def initial_lstm_state(self, batch: int):
        return torch.zeros(1, batch, 1), torch.zeros(1, batch, 1)

    def to_scalar(self, logits: torch.Tensor) -> torch.Tensor:
        return logits[..., 0]

    def recurrent_inference(self, latent, lstm_state, action):
        first = torch.where(latent[:, 0] == 0, action.double() + 1, latent[:, 0])
        prefix = self.rewards[first.long() - 1].view(-1, 1)  # constant below the first edge: later rewards are 0
        zeros = torch.zeros(latent.shape[0], 1)
        return RecurrentOutput(first.view(-1, 1), lstm_state, prefix, zeros, torch.zeros(latent.shape[0], 3))


@pytest.mark.parametrize("tree", [delayzoo.ctree, ptree], ids=["default", "ptree"])
@pytest.mark.parametrize("q_normalization", ["tree", "parent_siblings"])
def test_uniform_prior_no_noise_and_an_exact_model_select_the_best_q(tree, q_normalization):
    rewards = [[0.2, 0.9, 0.5], [0.7, 0.1, 0.4]]
    config = SearchConfig(num_simulations=16, lstm_horizon=100, method="gumbel", q_normalization=q_normalization)
    for b, row in enumerate(rewards):
        out = MCTS(3, config, tree=tree).search(
            BanditNet(row), torch.zeros(1, 1, dtype=torch.float64), torch.zeros(1, 3), np.random.default_rng(b), False,
            root_value_logits=torch.zeros(1, 1),
        )
        assert out.actions[0] == int(np.argmax(row)) and out.visits.sum() == 16
        assert int(np.argmax(out.policy[0])) == int(np.argmax(row))
        assert out.policy[0, np.argmax(row)] > 1 / 3  # the improved policy moved mass from the uniform prior


def test_the_gumbel_noise_is_drawn_from_the_generator_only_with_noise():
    config = SearchConfig(num_simulations=6, lstm_horizon=100, method="gumbel", gumbel_scale=2.0)
    mcts, net = MCTS(3, config), BanditNet([0.0, 0.0, 0.0])
    roots, logits = torch.zeros(64, 1, dtype=torch.float64), torch.zeros(64, 3)
    quiet = mcts.search(net, roots, logits, np.random.default_rng(0), False)
    noisy = mcts.search(net, roots, logits, np.random.default_rng(0), True)
    # equal Q everywhere: without noise every root breaks the same ties by its seeded generator; with it, the
    # Gumbel-top-k sample spreads the selected actions over all three
    assert len(set(noisy.actions.tolist())) == 3
    assert quiet.visits.sum() == noisy.visits.sum() == 64 * 6


def test_acting_takes_the_search_action_and_stores_the_improved_policy(tiny_mlp):
    space = spaces.Box(-1.0, 1.0, (4,), dtype=np.float32)
    config = SearchConfig(num_simulations=8, method="gumbel")
    policy = MlpPolicy(space, spaces.Discrete(3), lambda _: 0.1, net_kwargs=tiny_mlp, search_config=config, seed=0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # EfficientZero's zero-initialised heads would make every choice a tie
        for parameter in policy.network.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    obs = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    first = policy.act(obs, deterministic=True, rng=np.random.default_rng(1))
    second = policy.act(obs, deterministic=True, rng=np.random.default_rng(2))
    np.testing.assert_array_equal(first.actions, second.actions)  # deterministic: no Gumbel noise
    training = policy.act(obs, deterministic=False, add_noise=True, temperature=0.25)
    np.testing.assert_allclose(training.policy.sum(axis=1), 1.0)
    assert not np.allclose(training.policy * 8, np.round(training.policy * 8))  # not visit fractions
    assert training.visits.sum() == 5 * 8


def test_reanalysis_targets_are_the_improved_policy(tiny_mlp, toy):
    model = DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=dict(net_kwargs=tiny_mlp),
                      search_kwargs=dict(method="gumbel"), **FAST)
    model.learn(24)
    batch = model.replay_buffer.sample(8, model.target_config, model._rng, 1.0)
    (_, policies, mask), = compute_targets(
        model.policy.target_network, model.policy.mcts, [batch], np.random.default_rng(0), frame_stack=1,
        reanalyze_ratio=1.0, chunk=None, device=torch.device("cpu"),
    )
    chosen = policies[mask.bool()]
    torch.testing.assert_close(chosen.sum(-1), torch.ones(len(chosen)))
    assert not torch.allclose(chosen * 4, torch.round(chosen * 4))  # 4 simulations: visits would be quarters


def test_the_method_and_its_constants_are_saved_and_loaded(tmp_path, tiny_mlp, toy):
    model = DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=dict(net_kwargs=tiny_mlp), search_kwargs=GUMBEL,
                      **FAST)
    model.learn(20)
    model.save(tmp_path / "dez.zip")
    loaded = DelayedEZ.load(tmp_path / "dez.zip", env=toy("vector"))
    assert loaded.search_kwargs == GUMBEL
    config = loaded.policy.search_config
    assert (config.method, config.num_considered_actions, config.gumbel_scale, config.c_visit, config.c_scale,
            config.q_normalization) == tuple(GUMBEL.values())
    loaded.learn(8, reset_num_timesteps=False)


@pytest.mark.parametrize(
    "search_kwargs, error, match",
    [
        (dict(method="x"), ValueError, "method.*'x'"),
        (dict(num_considered_actions=0), ValueError, "num_considered_actions"),
        (dict(num_simulations=8), ValueError, "num_simulations"),
        (dict(discount=0.9), ValueError, r"'discount'.*gamma="),
        (dict(q_normalization="node"), ValueError, "q_normalization.*'node'"),
        (dict(c_visit=-1.0), ValueError, "c_visit"),
        (dict(temperature=1.0), ValueError, "unknown key 'temperature'"),
        ("gumbel", TypeError, "search_kwargs must be a dict"),
    ],
)
def test_bad_search_kwargs_raise_naming_them(search_kwargs, error, match, tiny_mlp, toy):
    with pytest.raises(error, match=match):
        DelayedEZ("MlpPolicy", toy("vector"), policy_kwargs=dict(net_kwargs=tiny_mlp), search_kwargs=search_kwargs,
                  **FAST)


@pytest.mark.parametrize(("method", "q_normalization", "reads"),
                         [("puct", "tree", False), ("puct", "parent_siblings", True), ("gumbel", "tree", True)])
def test_the_roots_values_are_read_only_by_a_search_that_needs_them(method, q_normalization, reads):
    """Non-finite value logits at the roots reach the tree (which names them) only where the search uses them."""
    config = SearchConfig(num_simulations=4, lstm_horizon=100, method=method, q_normalization=q_normalization)
    search = MCTS(3, config).search
    arguments = (BanditNet([0.1, 0.2, 0.3]), torch.zeros(2, 1, dtype=torch.float64), torch.zeros(2, 3),
                 np.random.default_rng(0), False)
    nan_logits = torch.full((2, 1), float("nan"))
    if reads:
        with pytest.raises(ValueError, match="values"):
            search(*arguments, root_value_logits=nan_logits)
    else:
        assert search(*arguments, root_value_logits=nan_logits).visits.sum() == 8
