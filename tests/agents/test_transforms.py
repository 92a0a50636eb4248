import pytest
import torch

from delayzoo.agents.common.transforms import (
    SHORT_SOFTMAX_CLASSES,
    _hats,
    short_softmax,
    symlog_support,
    two_hot,
    two_hot_target,
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


def test_two_hot_as_hat_functions_equals_two_hot_on_uneven_supports():
    """The compiled form of the two-hot likelihood (hat functions) on a support with uneven gaps."""
    support = torch.tensor([-5.0, -1.0, 0.0, 0.5, 3.0, 10.0])
    x = torch.tensor([-9.0, -5.0, -3.0, -1.0, 0.2, 0.5, 1.0, 9.9, 10.0, 12.0])
    torch.testing.assert_close(_hats(x, support), two_hot(x, support))


def test_two_hot_target_under_torch_compile_equals_the_eager_two_hot():
    """Compiled, the target is the hat functions; the cross-entropy and its gradient stay the eager ones."""
    generator = torch.Generator().manual_seed(1)
    support = symlog_support(255)
    x = torch.cat([torch.randn(3, 50, generator=generator) * 8, torch.full((3, 2), 30.0)], dim=1)
    logits = torch.randn(3, 52, 255, generator=generator, requires_grad=True)

    def loss(logits):
        return (two_hot_target(x, support) * torch.log_softmax(logits, -1)).sum(-1).square().sum()

    torch._dynamo.reset()
    eager, compiled = loss(logits), torch.compile(loss, backend="aot_eager")(logits)
    (eager_grad,) = torch.autograd.grad(eager, logits)
    (compiled_grad,) = torch.autograd.grad(compiled, logits)
    torch._dynamo.reset()
    torch.testing.assert_close(two_hot_target(x, support), two_hot(x, support))
    torch.testing.assert_close(compiled, eager)
    torch.testing.assert_close(compiled_grad, eager_grad)
