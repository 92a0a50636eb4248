import pytest
import torch

from delayzoo.agents.common.transforms import (
    SHORT_SOFTMAX_CLASSES,
    _hats,
    short_softmax,
    symlog_support,
    two_hot,
    two_hot_log_likelihood,
)


@pytest.mark.parametrize("shape", [(3, 8), (16, 16, 8, 8), (5, 2), (4, 1), (7, 255), (2, 3, SHORT_SOFTMAX_CLASSES)])
def test_short_softmax_matches_softmax_values_and_gradients(shape):
    torch.manual_seed(0)
    logits = (4.0 * torch.randn(*shape, dtype=torch.float64)).requires_grad_()
    reference = logits.detach().clone().requires_grad_()
    out, expected = short_softmax(logits), torch.softmax(reference, dim=-1)
    weights = torch.randn(shape, dtype=torch.float64)
    (out * weights).sum().backward()
    (expected * weights).sum().backward()
    assert out.shape == expected.shape
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(logits.grad, reference.grad, rtol=1e-10, atol=1e-13)


def test_short_softmax_float32_agrees_to_rounding():
    logits = 3.0 * torch.randn(256, 8, 8)
    torch.testing.assert_close(short_softmax(logits), torch.softmax(logits, -1), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bins", [21, 255])
def test_two_hot_log_likelihood_equals_dense_two_hot_cross_entropy(bins):
    generator = torch.Generator().manual_seed(0)
    support = symlog_support(bins)
    x = torch.cat([torch.randn(40, generator=generator) * 8, torch.tensor([-30.0, 30.0, 0.0, support[3].item()])])
    logits = torch.randn(x.shape[0], bins, generator=generator, requires_grad=True)
    dense = (two_hot(x, support) * torch.log_softmax(logits, -1)).sum(-1)
    (dense_grad,) = torch.autograd.grad(dense.square().sum(), logits)
    gathered = two_hot_log_likelihood(x, torch.log_softmax(logits, -1), support)
    (gathered_grad,) = torch.autograd.grad(gathered.square().sum(), logits)
    torch.testing.assert_close(gathered, dense)
    torch.testing.assert_close(gathered_grad, dense_grad)


def test_two_hot_as_hat_functions_equals_two_hot_on_uneven_supports():
    """The compiled form of the two-hot likelihood (hat functions) on a support with uneven gaps."""
    support = torch.tensor([-5.0, -1.0, 0.0, 0.5, 3.0, 10.0])
    x = torch.tensor([-9.0, -5.0, -3.0, -1.0, 0.2, 0.5, 1.0, 9.9, 10.0, 12.0])
    torch.testing.assert_close(_hats(x, support), two_hot(x, support))


def test_two_hot_log_likelihood_under_torch_compile_equals_the_eager_form():
    generator = torch.Generator().manual_seed(1)
    support = symlog_support(255)
    x = torch.randn(3, 50, generator=generator) * 8
    logits = torch.randn(3, 50, 255, generator=generator, requires_grad=True)

    def loss(logits):
        return two_hot_log_likelihood(x, torch.log_softmax(logits, -1), support).square().sum()

    torch._dynamo.reset()
    eager, compiled = loss(logits), torch.compile(loss, backend="aot_eager")(logits)
    (eager_grad,) = torch.autograd.grad(eager, logits)
    (compiled_grad,) = torch.autograd.grad(compiled, logits)
    torch._dynamo.reset()
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(compiled_grad, eager_grad)
