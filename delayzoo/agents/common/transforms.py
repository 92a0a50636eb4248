"""Value transforms and categorical supports shared by the agents.

PWM predicts rewards and values as a two-hot distribution over ``symlog``-spaced bins (DreamerV3);
DelayedEZ uses EfficientZero's ``h(x)`` transform with a categorical support of integers. Both reduce
to the same two operations on a support: encode a scalar as a two-hot vector, decode logits by their
expectation, which live here once.
"""

from __future__ import annotations

import torch


def symlog(x: torch.Tensor) -> torch.Tensor:
    """``sign(x) * log(1 + |x|)``: squashes large magnitudes, identity-like near 0."""
    return torch.sign(x) * torch.log1p(torch.abs(x))


def symexp(x: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`symlog`."""
    return torch.sign(x) * torch.expm1(torch.abs(x))


def h_transform(x: torch.Tensor, eps: float = 0.001) -> torch.Tensor:
    """EfficientZero / MuZero value transform ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x``."""
    return torch.sign(x) * (torch.sqrt(torch.abs(x) + 1.0) - 1.0) + eps * x


def h_inverse(y: torch.Tensor, eps: float = 0.001) -> torch.Tensor:
    """Exact inverse of :func:`h_transform` (closed form of the quadratic in ``sqrt(|x| + 1)``)."""
    inner = torch.sqrt(1.0 + 4.0 * eps * (torch.abs(y) + 1.0 + eps)) - 1.0
    return torch.sign(y) * ((inner / (2.0 * eps)) ** 2 - 1.0)


def two_hot(x: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Encode scalars ``x`` (any shape) as two-hot weights over the sorted 1-D ``support``.

    The two bins around ``x`` share the mass in proportion to closeness, so the expectation over the
    support gives back ``x`` exactly; values outside the support are put on the nearest end bin.
    Returns a tensor of shape ``x.shape + (len(support),)``.
    """
    support = support.to(dtype=x.dtype, device=x.device)
    x = x.clamp(support[0], support[-1])
    upper = torch.searchsorted(support, x.detach().contiguous(), right=False).clamp(1, len(support) - 1)
    lower = upper - 1
    low_value, high_value = support[lower], support[upper]
    weight_high = (x - low_value) / (high_value - low_value)
    out = torch.zeros(*x.shape, len(support), dtype=x.dtype, device=x.device)
    out.scatter_(-1, lower.unsqueeze(-1), (1.0 - weight_high).unsqueeze(-1))
    out.scatter_add_(-1, upper.unsqueeze(-1), weight_high.unsqueeze(-1))
    return out


def two_hot_target(x: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """:func:`two_hot`, written for ``torch.compile`` when compiling.

    Under ``torch.compile`` the two-hot is the bins' hat functions, one element-wise expression the
    compiler fuses into the cross-entropy's reduction (inductor's code for :func:`two_hot`'s scatter is
    slow); run eagerly it is :func:`two_hot` (gathering the two bins instead was slower over PWM's whole
    update). The values agree up to float rounding.
    """
    return _hats(x, support) if torch.compiler.is_compiling() else two_hot(x, support)


def _hats(x: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """:func:`two_hot` as the bins' piecewise-linear hat functions at ``x`` (clamped to the support)."""
    support = support.to(dtype=x.dtype, device=x.device)
    gaps = support[1:] - support[:-1]
    infinite = support.new_full((1,), float("inf"))
    left, right = torch.cat([infinite, gaps]), torch.cat([gaps, infinite])
    offset = x.clamp(support[0], support[-1]).unsqueeze(-1) - support
    return torch.minimum(1.0 + offset / left, 1.0 - offset / right).clamp(0.0, 1.0)


def expectation(logits: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """Mean of the categorical ``softmax(logits)`` over ``support`` (last dimension)."""
    return torch.softmax(logits, dim=-1) @ support.to(dtype=logits.dtype, device=logits.device)


SHORT_SOFTMAX_CLASSES = 16
"""Below this many classes :func:`short_softmax` takes the softmax along a leading dimension."""


def short_softmax(logits: torch.Tensor) -> torch.Tensor:
    """``torch.softmax(logits, -1)``, faster on CPU when the last dimension is short (a few classes).

    PyTorch's CPU softmax over a last dimension shorter than its vector width (e.g. the 8 classes of a
    small world model's latents) runs 4x slower, forward and backward, than the same softmax taken
    along a leading dimension, which is what this does below :data:`SHORT_SOFTMAX_CLASSES` classes
    (from 16 classes on the last-dimension kernel is the faster one). The values agree up to float rounding.
    """
    if logits.shape[-1] >= SHORT_SOFTMAX_CLASSES:
        return torch.softmax(logits, dim=-1)
    return torch.softmax(logits.movedim(-1, 0), dim=0).movedim(0, -1)


def symlog_support(num_bins: int = 255, limit: float = 20.0) -> torch.Tensor:
    """DreamerV3 / PaMoRL bins: evenly spaced in symlog space over [-limit, limit]."""
    return torch.linspace(-limit, limit, num_bins)


def integer_support(size: int = 300) -> torch.Tensor:
    """EfficientZero bins: the integers -size..size (601 bins for size 300) in h-space."""
    return torch.arange(-size, size + 1, dtype=torch.float32)
