import copy

import numpy as np
import pytest
import torch
from plain_reference import plain_mlp, plain_recurrent_inference

from delayzoo.agents.common.transforms import h_inverse, h_transform, integer_support, two_hot
from delayzoo.agents.delayed_ez import DelayedEZ
from delayzoo.agents.delayed_ez.networks import BatchNorm1d, build_network
from delayzoo.agents.delayed_ez.reanalysis import batch_stacks


def test_h_transform_round_trip_over_the_601_bin_range():
    x = torch.cat([torch.linspace(-5e4, 5e4, 1001), torch.tensor([0.0, 1e-3, -0.5, 3.7])]).double()
    y = h_transform(x)
    assert y.abs().max() <= 300.5  # the 601 integer bins cover the value range
    torch.testing.assert_close(h_inverse(y), x, rtol=1e-7, atol=1e-5)


def test_two_hot_targets_decode_to_the_scalar_through_network_to_scalar(tiny_mlp):
    net = build_network((4,), 2, False, **{**tiny_mlp, "support_size": 300})
    values = torch.tensor([-1234.5, -3.2, 0.0, 0.4, 17.0, 2500.0], dtype=torch.float64)
    target = two_hot(h_transform(values), integer_support(300).double())
    assert target.shape == (6, 601)
    torch.testing.assert_close(target.sum(-1), torch.ones(6, dtype=torch.float64))
    assert ((target > 0).sum(-1) <= 2).all()
    decoded = net.to_scalar(torch.log(target.float().clamp_min(1e-30)))
    torch.testing.assert_close(decoded.double(), values, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("downsample, expected", [(False, (4, 12, 12)), (True, (4, 1, 1))])
def test_conv_network_shapes_and_normalised_latents(tiny_conv, downsample, expected):
    net = build_network((3, 12, 12), 5, True, 1 / 255, **{**tiny_conv, "downsample": downsample, "state_norm": True})
    assert net.latent_shape == expected
    obs = torch.randint(0, 256, (6, 3, 12, 12), dtype=torch.uint8)
    out = net.initial_inference(obs)
    assert out.latent.shape == (6, *expected)
    assert out.value_logits.shape == (6, 21) and out.policy_logits.shape == (6, 5)
    flat = out.latent.flatten(1)
    torch.testing.assert_close(flat.min(1).values, torch.zeros(6))
    constant = (net.representation(obs.float() / 255).flatten(1).std(1) == 0).float()
    torch.testing.assert_close(flat.max(1).values, 1.0 - constant, atol=1e-4, rtol=0)  # a constant latent maps to 0
    rec = net.recurrent_inference(out.latent, net.initial_lstm_state(6), torch.arange(6) % 5)
    assert rec.latent.shape == out.latent.shape
    assert rec.lstm_state[0].shape == (1, 6, 8)
    assert rec.value_prefix_logits.shape == (6, 21)
    assert net.project(rec.latent).shape == (6, 8)


def test_latent_normalisation_is_off_for_the_conv_network_as_in_efficientzero(tiny_conv, tiny_mlp):
    conv = build_network((3, 12, 12), 5, True, 1 / 255, **tiny_conv)
    assert not conv.config.state_norm and build_network((4,), 2, False, **tiny_mlp).config.state_norm
    obs = torch.randint(0, 256, (6, 3, 12, 12), dtype=torch.uint8)
    torch.testing.assert_close(conv.represent(obs), conv.representation(obs.float() / 255))


def test_paper_sizes_by_default():
    net = build_network((12, 96, 96), 18, True, 1 / 255)
    assert net.latent_shape == (64, 6, 6)
    assert net.lstm.hidden_size == 512 and net.support.numel() == 601
    assert net.projection[-2].out_features == 1024 and net.projection_head[0].out_features == 512


def test_the_action_changes_the_dynamics(tiny_mlp):
    net = build_network((4,), 3, False, **tiny_mlp).eval()
    with torch.no_grad():
        latent = net.represent(torch.randn(1, 4)).expand(3, -1)
        nxt, _, _ = net.dynamics(latent, torch.arange(3), net.initial_lstm_state(3))
    assert not torch.allclose(nxt[0], nxt[1]) and not torch.allclose(nxt[1], nxt[2])


def test_training_step_at_batch_size_one_does_not_crash(tiny_conv, tiny_mlp):
    for net, obs in (
        (build_network((3, 12, 12), 3, True, **tiny_conv), torch.rand(1, 3, 12, 12)),
        (build_network((4,), 2, False, **tiny_mlp), torch.randn(1, 4)),
    ):
        net.train()
        out = net.initial_inference(obs)
        rec = net.recurrent_inference(out.latent, net.initial_lstm_state(1), torch.tensor([1]))
        loss = rec.value_prefix_logits.sum() + rec.value_logits.sum() + net.project(rec.latent).sum()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_batchnorm_single_sample_uses_running_statistics():
    bn = BatchNorm1d(3)
    bn.running_mean.fill_(1.0)
    bn.running_var.fill_(4.0)
    out = bn.train()(torch.tensor([[3.0, 1.0, -1.0]]))
    torch.testing.assert_close(out, torch.tensor([[1.0, 0.0, -1.0]]), atol=1e-4, rtol=0)


def test_bad_network_options_are_refused(tiny_mlp):
    with pytest.raises(ValueError, match="widht"):
        build_network((4,), 2, False, widht=3)
    with pytest.raises(ValueError, match="image observations"):
        build_network((4,), 2, True)
    with pytest.raises(ValueError, match="num_actions"):
        build_network((4,), 0, False, **tiny_mlp)



@pytest.mark.parametrize("training", [False, True])
def test_lean_layers_compute_exactly_what_the_plain_modules_compute(tiny_mlp, training):
    torch.manual_seed(0)
    net = build_network((4,), 3, False, **tiny_mlp)
    with torch.no_grad():
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
        for module in net.modules():
            if isinstance(module, torch.nn.BatchNorm1d):
                module.running_mean.normal_(0.0, 0.3)
                module.running_var.uniform_(0.5, 2.0)
    twin = copy.deepcopy(net)
    net.train(training)
    twin.train(training)
    latent, action = torch.rand(16, tiny_mlp["latent_dim"]), torch.randint(0, 3, (16,))
    state = (torch.randn(1, 16, tiny_mlp["lstm_hidden_size"]), torch.randn(1, 16, tiny_mlp["lstm_hidden_size"]))
    lean = net.recurrent_inference(latent, state, action)
    plain = plain_recurrent_inference(twin, latent, state, action)
    for ours, reference in zip(
        (lean.latent, *lean.lstm_state, lean.value_prefix_logits, lean.value_logits, lean.policy_logits),
        (plain.latent, *plain.lstm_state, plain.value_prefix_logits, plain.value_logits, plain.policy_logits),
    ):
        assert torch.equal(ours, reference)
    projected = net.project(lean.latent)
    assert torch.equal(projected, plain_mlp(twin.projection_head, plain_mlp(twin.projection, plain.latent)))
    for (name, ours), (_, reference) in zip(net.state_dict().items(), twin.state_dict().items()):
        assert torch.equal(ours, reference), name  # the same running statistics in training mode
    if training:
        assert net.dyn_mlp[1].num_batches_tracked.item() == 1


def _first_step_mismatch(net, obs: torch.Tensor, actions: torch.Tensor) -> float:
    """Mean gap between the value-prefix norm's output for the first unroll step in training and in the search."""
    module = net.value_prefix_bn if net.config.value_prefix_norm == "batch" else net.value_prefix_ln
    seen = []
    module.register_forward_hook(lambda _module, inputs, output: seen.append((inputs[0], output)))
    with torch.no_grad():
        net.train()
        for _ in range(30):  # the running statistics settle over unrolls of 5 steps
            latent, state = net.represent(obs), net.initial_lstm_state(len(obs))
            for _step in range(5):
                latent, state, _ = net.dynamics(latent, actions, state)
        hidden, trained = seen[-5]  # the first of the last unroll's five steps
        net.eval()
        return (trained - module(hidden)).abs().mean().item()


@pytest.mark.parametrize("family", ["mlp", "conv"])
def test_value_prefix_norm_layer_gives_the_search_the_first_step_features_training_saw(family, tiny_mlp, tiny_conv):
    """Batch norm trains each unroll step on its own statistics but searches with running ones that mix the
    steps (EfficientZero's value-prefix head, the default); layer norm has no running statistics to mix."""
    torch.manual_seed(0)
    shape, image, kwargs = ((4,), False, tiny_mlp) if family == "mlp" else ((3, 12, 12), True, tiny_conv)
    obs, actions = torch.rand(64, *shape), torch.randint(0, 2, (64,))
    gap = {}
    for norm in ("batch", "layer"):
        net = build_network(shape, 2, image, **{**kwargs, "value_prefix_norm": norm})
        assert not hasattr(net, "value_prefix_ln" if norm == "batch" else "value_prefix_bn")
        gap[norm] = _first_step_mismatch(net, obs, actions)
    assert gap["layer"] < 1e-5 < 0.1 < gap["batch"]


def test_value_prefix_norm_names_the_bad_value(tiny_mlp):
    with pytest.raises(ValueError, match=r"value_prefix_norm must be one of \('batch', 'layer'\), got 'group'"):
        build_network((4,), 2, False, **{**tiny_mlp, "value_prefix_norm": "group"})


def test_hidden_norm_layer_makes_the_searched_network_the_trained_one(tiny_mlp):
    """With batch norm in the hidden layers, training (batch statistics) and the search (running statistics
    mixed over the unroll steps) read the same roots differently; layer norm has no statistics to mix."""
    torch.manual_seed(0)
    obs, actions = torch.rand(64, 4), torch.randint(0, 2, (64,))
    gap = {}
    for norm in ("batch", "layer"):
        net = build_network((4,), 2, False, **{**tiny_mlp, "hidden_norm": norm})
        norms = (BatchNorm1d, torch.nn.LayerNorm)
        layers = [module for module in net.policy_head.modules() if isinstance(module, norms)]
        wanted = BatchNorm1d if norm == "batch" else torch.nn.LayerNorm
        assert layers and all(isinstance(module, wanted) for module in layers)
        for parameter in net.policy_head.parameters():  # a policy head that is not all zero
            torch.nn.init.normal_(parameter)
        net.train()
        with torch.no_grad():
            for _ in range(20):  # training passes: the roots, then dynamics latents, as the unroll feeds them
                root = net.initial_inference(obs)
                net.dynamics(root.latent, actions, net.initial_lstm_state(64))
                net.prediction(net.dynamics(root.latent, actions, net.initial_lstm_state(64))[0])
            trained = net.initial_inference(obs).policy_logits
            net.eval()
            searched = net.initial_inference(obs).policy_logits
        gap[norm] = (trained - searched).abs().max().item()
    assert gap["layer"] < 1e-5 < 1e-2 < gap["batch"]


def test_hidden_norm_names_the_bad_value(tiny_mlp):
    with pytest.raises(ValueError, match=r"hidden_norm must be one of \('batch', 'layer'\), got 'group'"):
        build_network((4,), 2, False, **{**tiny_mlp, "hidden_norm": "group"})


def _norm_modules(net):
    return {name: type(module).__name__ for name, module in net.named_modules()
            if isinstance(module, (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.GroupNorm, torch.nn.LayerNorm))}


@pytest.mark.parametrize("downsample", [False, True])
def test_the_conv_family_with_layer_norms_acts_as_it_trains(tiny_conv, downsample):
    torch.manual_seed(0)
    config = {**tiny_conv, "downsample": downsample, "hidden_norm": "layer", "value_prefix_norm": "layer"}
    net = build_network((3, 64, 64) if downsample else (3, 12, 12), 3, True, **config)
    norms = _norm_modules(net)
    assert {name for name, kind in norms.items() if kind.startswith("BatchNorm")} == {
        name for name in norms if name.startswith("projection")  # only the SimSiam branches, read in training only
    }
    assert {"dyn_bn", "reward_reduce.1", "value_reduce.1", "policy_reduce.1", "pred_blocks.0.bn2"} <= set(norms)
    assert any(kind == "GroupNorm" for kind in norms.values()) and any(kind == "LayerNorm" for kind in norms.values())
    obs = torch.rand(6, *net.observation_shape) * 255
    actions = torch.tensor([0, 1, 2, 0, 1, 2])
    outputs = []
    for training in (True, False):
        net.train(training)
        with torch.no_grad():
            root = net.initial_inference(obs)
            step = net.recurrent_inference(root.latent, net.initial_lstm_state(6), actions)
        outputs.append([*root, step.latent, step.value_prefix_logits, step.value_logits, step.policy_logits])
    for trained, acting in zip(*outputs):
        torch.testing.assert_close(acting, trained)
    batch_norms = build_network(net.observation_shape, 3, True, **{**config, "hidden_norm": "batch"})
    assert sum(kind == "BatchNorm2d" for kind in _norm_modules(batch_norms).values()) > 4  # the paper's default


def test_an_unknown_hidden_norm_is_refused_for_both_families(tiny_conv, tiny_mlp):
    with pytest.raises(ValueError, match="hidden_norm must be one of .*'group'"):
        build_network((3, 12, 12), 3, True, **{**tiny_conv, "hidden_norm": "group"})
    with pytest.raises(ValueError, match="hidden_norm must be one of .*'instance'"):
        build_network((4,), 2, False, **{**tiny_mlp, "hidden_norm": "instance"})


def _value_prefix_error(net, batch, training: bool, lstm_horizon: int) -> float:
    """Mean |predicted - target| value prefix over a batch's unroll steps, the model unrolled as in training."""
    net.train(training)
    with torch.no_grad():
        latent = net.represent(batch_stacks(batch, batch.policy_offset, 1, torch.device("cpu"))[:, 0])
        state = net.initial_lstm_state(len(latent))
        actions, errors = torch.as_tensor(batch.actions), []
        for step in range(actions.shape[1]):
            latent, state, logits = net.dynamics(latent, actions[:, step], state)
            errors.append((net.to_scalar(logits) - torch.as_tensor(batch.target_value_prefix[:, step])).abs())
            if (step + 1) % lstm_horizon == 0:
                state = net.initial_lstm_state(len(latent))
    net.train(False)
    mask = torch.as_tensor(batch.value_prefix_mask)
    return float((torch.stack(errors, 1) * mask).sum() / mask.sum())


def test_with_layer_norms_the_search_reads_the_value_prefix_as_training_fitted_it(tiny_conv, toy):
    net_kwargs = {**tiny_conv, "hidden_norm": "layer", "value_prefix_norm": "layer"}
    settings = dict(policy_kwargs=dict(net_kwargs=net_kwargs), learning_starts=32, batch_size=16, num_simulations=2,
                    augment=False, lr_warmup_steps=10, learning_rate=0.05, target_update_interval=50,
                    replay_buffer_kwargs=dict(segment_length=12), seed=0)
    model = DelayedEZ("CnnPolicy", toy("image"), **settings)
    untrained = copy.deepcopy(model.policy.network)
    model.learn(332)
    assert model._n_updates == 300
    batch = model.replay_buffer.sample(128, model.target_config, np.random.default_rng(0), 1.0)
    acting = _value_prefix_error(model.policy.network, batch, False, model.lstm_horizon)  # search and reanalysis
    fitted = _value_prefix_error(model.policy.network, batch, True, model.lstm_horizon)  # the update's reading
    assert acting <= 1.2 * fitted
    assert fitted < 0.9 * _value_prefix_error(untrained, batch, True, model.lstm_horizon)  # it did learn
