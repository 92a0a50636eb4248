import pytest
import torch

from delayzoo.agents.common.scan import lambda_returns, linear_recurrence


def reference_recurrence(a, b, reset=None, reverse=False):
    """The definition, written as a plain autograd loop."""
    a, b = torch.broadcast_tensors(a, b)
    steps = range(b.shape[0] - 1, -1, -1) if reverse else range(b.shape[0])
    h = torch.zeros_like(b[0])
    out = [None] * b.shape[0]
    for t in steps:
        decay = a[t]
        if reset is not None:
            keep = (~reset[t]).to(b.dtype).reshape(*reset[t].shape, *([1] * (b.ndim - reset.ndim)))
            decay = decay * keep
        h = decay * h + b[t]
        out[t] = h
    return torch.stack(out)


def reference_lambda_returns(reward, value, discount, lambd):
    returns = [None] * reward.shape[0]
    nxt = value[-1]
    for t in range(reward.shape[0] - 1, -1, -1):
        nxt = reward[t] + discount[t] * ((1 - lambd) * value[t + 1] + lambd * nxt)
        returns[t] = nxt
    return torch.stack(returns)


def random_inputs(length, seed, shape=(3, 4), a_shape=None):
    generator = torch.Generator().manual_seed(seed)
    a = torch.rand(length, *(a_shape or shape), generator=generator, dtype=torch.float64)
    b = torch.randn(length, *shape, generator=generator, dtype=torch.float64)
    reset = torch.rand(length, shape[0], generator=generator) < 0.25
    return a.requires_grad_(), b.requires_grad_(), reset


@pytest.mark.parametrize("method", ["parallel", "sequential", "auto"])
@pytest.mark.parametrize("length", [1, 2, 3, 7, 16, 33])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_reset", [False, True])
def test_linear_recurrence_matches_loop_values_and_gradients(method, length, reverse, with_reset):
    a, b, reset = random_inputs(length, seed=length)
    reset = reset if with_reset else None
    out = linear_recurrence(a, b, reset=reset, reverse=reverse, method=method)
    expected = reference_recurrence(a, b, reset=reset, reverse=reverse)
    torch.testing.assert_close(out, expected)

    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), (a, b))
    expected_grads = torch.autograd.grad((expected * weights).sum(), (a, b))
    for grad, expected_grad in zip(grads, expected_grads):
        torch.testing.assert_close(grad, expected_grad)


@pytest.mark.parametrize("method", ["parallel", "sequential"])
def test_linear_recurrence_broadcast_decay_gets_summed_gradient(method):
    # The sequence model's shape: decay over keys (T, B, K, 1), state k v^T over (T, B, K, V).
    a, b, reset = random_inputs(9, seed=3, shape=(2, 3, 5), a_shape=(2, 3, 1))
    out = linear_recurrence(a, b, reset=reset, method=method)
    expected = reference_recurrence(a, b, reset=reset)
    torch.testing.assert_close(out, expected)
    grad_a = torch.autograd.grad(out.square().sum(), a)[0]
    expected_grad_a = torch.autograd.grad(expected.square().sum(), a)[0]
    assert grad_a.shape == a.shape
    torch.testing.assert_close(grad_a, expected_grad_a)


@pytest.mark.parametrize("method", ["parallel", "sequential"])
def test_linear_recurrence_passes_gradcheck_including_second_order(method):
    a, b, reset = random_inputs(5, seed=11, shape=(2,))
    fn = lambda a_, b_: linear_recurrence(a_, b_, reset=reset, method=method)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (a, b))
    assert torch.autograd.gradgradcheck(fn, (a, b))


def test_reset_restarts_the_recurrence():
    a = torch.full((4, 1), 2.0)
    b = torch.ones(4, 1)
    reset = torch.tensor([False, False, True, False])
    for method in ("parallel", "sequential"):
        out = linear_recurrence(a, b, reset=reset, method=method)
        assert out.flatten().tolist() == [1.0, 3.0, 1.0, 3.0]


def test_linear_recurrence_rejects_bad_input():
    a, b = torch.rand(4, 2), torch.rand(4, 2)
    with pytest.raises(ValueError, match="fast"):
        linear_recurrence(a, b, method="fast")
    with pytest.raises(ValueError, match=r"\(3,\)"):
        linear_recurrence(a, b, reset=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"\(3, 2\)"):
        linear_recurrence(torch.rand(3, 2), b)


@pytest.mark.parametrize("method", ["parallel", "sequential"])
@pytest.mark.parametrize("length", [1, 4, 15])
def test_lambda_returns_match_backward_loop(method, length):
    generator = torch.Generator().manual_seed(length)
    reward = torch.randn(length, 6, generator=generator, dtype=torch.float64)
    value = torch.randn(length + 1, 6, generator=generator, dtype=torch.float64, requires_grad=True)
    discount = 0.99 * (torch.rand(length, 6, generator=generator, dtype=torch.float64) > 0.1)
    out = lambda_returns(reward, value, discount, 0.95, method=method)
    expected = reference_lambda_returns(reward, value, discount, 0.95)
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), value)[0], torch.autograd.grad(expected.sum(), value)[0])


def test_lambda_returns_edge_lambdas():
    reward = torch.tensor([1.0, 2.0, 3.0])
    value = torch.tensor([10.0, 20.0, 30.0, 40.0])
    # lambda = 0: one-step TD targets; lambda = 1: discounted Monte-Carlo with a V_T bootstrap.
    torch.testing.assert_close(lambda_returns(reward, value, 0.5, 0.0), reward + 0.5 * value[1:])
    torch.testing.assert_close(lambda_returns(reward, value, 0.5, 1.0), torch.tensor([7.75, 13.5, 23.0]))


def test_lambda_returns_rejects_value_of_wrong_length():
    with pytest.raises(ValueError, match="one step longer"):
        lambda_returns(torch.zeros(5), torch.zeros(5), 0.9, 0.95)
