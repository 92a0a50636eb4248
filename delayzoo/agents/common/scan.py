"""First-order linear recurrences over time, with a parallel and a sequential evaluation.

``h_t = a_t * h_{t-1} + b_t`` (elementwise, along dim 0) is the token mixer of PWM's sequence model
(``a`` = data-dependent decay, ``b`` = ``k v^T``) and, run backwards, the lambda-return (PaMoRL's
PETE). Both evaluations compute the same values and gradients:

- ``"sequential"``: a loop over time, ``T`` dependent steps of ``O(1)`` work each;
- ``"parallel"``: an odd-even associative scan, ``2 log2(T)`` dependent steps and ``O(T)`` work
  overall, which wins where kernel launches are cheap relative to the loop's serial chain (GPUs);
- ``"auto"``: ``"sequential"`` on CPU tensors, where memory traffic dominates and the loop's single
  pass is about twice as fast as the scan (``benchmarks/scan_speed.py``), ``"parallel"`` on
  accelerators, where the scan's short dependency chain pays (the agents use ``"auto"``).

The backward pass is itself a linear recurrence in the opposite direction (evaluated by the same
method), so neither method stores a per-step autograd graph.
"""

from __future__ import annotations

import torch

SCAN_METHODS = ("auto", "parallel", "sequential")


def _resolve_method(method: str, tensor: torch.Tensor) -> str:
    if method not in SCAN_METHODS:
        raise ValueError(f"method must be one of {SCAN_METHODS}, got {method!r}")
    if method == "auto":
        return "sequential" if tensor.device.type == "cpu" else "parallel"
    return method


def _sequential_scan(a: torch.Tensor, b: torch.Tensor, reverse: bool) -> torch.Tensor:
    out = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    steps = range(b.shape[0] - 1, -1, -1) if reverse else range(b.shape[0])
    previous = None
    for t in steps:
        if previous is None:
            out[t].copy_(b[t])
        else:
            torch.addcmul(b[t], a[t], out[previous], out=out[t])
        previous = t
    return out


def _parallel_scan_forward(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    length = b.shape[0]
    if length == 1:
        return b.clone()
    pairs = length // 2
    a_even, a_odd = a[0 : 2 * pairs : 2], a[1 : 2 * pairs : 2]
    b_even, b_odd = b[0 : 2 * pairs : 2], b[1 : 2 * pairs : 2]
    # Compose each (even, odd) pair into one step: h_odd = (a_o a_e) h_{odd-2} + (a_o b_e + b_o).
    h_odd = _parallel_scan_forward(a_odd * a_even, torch.addcmul(b_odd, a_odd, b_even))
    out = torch.empty(b.shape, dtype=b.dtype, device=b.device)
    out[1::2] = h_odd
    out[0] = b[0]
    later_evens = length - pairs - 1
    if later_evens > 0:
        out[2::2] = torch.addcmul(b[2::2], a[2::2], h_odd[:later_evens])
    return out


def _scan(a: torch.Tensor, b: torch.Tensor, reverse: bool, method: str) -> torch.Tensor:
    if method == "sequential":
        return _sequential_scan(a, b, reverse)
    if reverse:
        return _parallel_scan_forward(a.flip(0), b.flip(0)).flip(0)
    return _parallel_scan_forward(a, b)


def _shift(x: torch.Tensor, towards_future: bool) -> torch.Tensor:
    """``x[t+1]`` (or ``x[t-1]`` when not ``towards_future``) with zeros past the ends."""
    pad = torch.zeros_like(x[:1])
    if towards_future:
        return torch.cat([x[1:], pad], dim=0)
    return torch.cat([pad, x[:-1]], dim=0)


class _LinearRecurrence(torch.autograd.Function):
    """``a`` is ``(T, ...)`` broadcastable to ``b``; gradients come back in ``a``'s own (small) shape."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, reverse: bool, method: str) -> torch.Tensor:
        with torch.no_grad():
            h = _scan(a, b, reverse, method)
        ctx.save_for_backward(a, h)
        ctx.reverse, ctx.method = reverse, method
        return h

    @staticmethod
    def backward(ctx, grad_h: torch.Tensor):
        a, h = ctx.saved_tensors
        reverse, method = ctx.reverse, ctx.method
        # dL/dh_t accumulates through h_{t+1} = a_{t+1} h_t + ...: a recurrence in the other direction.
        carry = _shift(a, towards_future=not reverse)
        grad_total = _LinearRecurrence.apply(carry, grad_h, not reverse, method)
        # dL/da_t = G_t * h_{t-1} (h_{t+1} when reversed), summed over the dims a is broadcast along.
        inner_shape = (a.shape[0] - 1, *a.shape[1:])
        if reverse:
            inner = (grad_total[:-1] * h[1:]).sum_to_size(inner_shape)
            grad_a = torch.cat([inner, torch.zeros_like(a[:1])], dim=0)
        else:
            inner = (grad_total[1:] * h[:-1]).sum_to_size(inner_shape)
            grad_a = torch.cat([torch.zeros_like(a[:1]), inner], dim=0)
        return grad_a, grad_total, None, None


def linear_recurrence(
    a: torch.Tensor,
    b: torch.Tensor,
    reset: torch.Tensor | None = None,
    reverse: bool = False,
    method: str = "parallel",
) -> torch.Tensor:
    """Compute ``h_t = a_t * h_{t-1} + b_t`` along dim 0 for every ``t``, with ``h_{-1} = 0``.

    :param a: decays, broadcastable to ``b`` (e.g. ``(T, B, K, 1)`` against ``(T, B, K, V)``).
    :param b: inputs, shape ``(T, ...)``.
    :param reset: optional boolean mask of shape ``(T,)`` or a leading prefix of ``b``'s shape; where
        true the recurrence restarts: ``h_t = b_t`` (a segmented scan).
    :param reverse: run from the end instead: ``h_t = a_t * h_{t+1} + b_t`` with ``h_T = 0`` (a reset
        at ``t`` then means ``h_t = b_t``).
    :param method: ``"parallel"``, ``"sequential"`` or ``"auto"`` (sequential on CPU, parallel
        elsewhere); all give the same values and gradients.
    :return: ``h`` with the broadcast shape of ``a`` and ``b``.
    """
    method = _resolve_method(method, b)
    if a.ndim > b.ndim or b.ndim == 0:
        raise ValueError(f"b must have a time dimension and at least a's {a.ndim} dims, got shape {tuple(b.shape)}")
    try:
        shape = torch.broadcast_shapes(a.shape, b.shape)
    except RuntimeError as error:
        raise ValueError(f"a {tuple(a.shape)} does not broadcast to b {tuple(b.shape)}") from error
    if shape != b.shape:
        raise ValueError(f"a {tuple(a.shape)} must broadcast to b's shape {tuple(b.shape)} along the time dimension")
    if reset is not None:
        if reset.ndim > len(shape) or tuple(reset.shape) != tuple(shape[: reset.ndim]):
            raise ValueError(f"reset shape {tuple(reset.shape)} must be a leading prefix of {tuple(shape)}")
        mask = reset.to(dtype=torch.bool, device=b.device).reshape(*reset.shape, *([1] * (len(shape) - reset.ndim)))
        a = torch.where(mask, torch.zeros((), dtype=a.dtype, device=a.device), a)
    a = a.reshape(*([1] * (b.ndim - a.ndim)), *a.shape)
    return _LinearRecurrence.apply(a.expand(b.shape[0], *a.shape[1:]), b, reverse, method)


def lambda_returns(
    reward: torch.Tensor,
    value: torch.Tensor,
    discount: torch.Tensor | float,
    lambd: torch.Tensor | float,
    method: str = "parallel",
) -> torch.Tensor:
    """TD(lambda) returns ``R_t = r_t + g_t ((1 - lambda) V_{t+1} + lambda R_{t+1})``, ``R_T = V_T``.

    Computed as one reverse :func:`linear_recurrence` (PaMoRL's parallel eligibility trace estimation).

    :param reward: rewards ``r_0 .. r_{T-1}``, shape ``(T, ...)``.
    :param value: values ``V_0 .. V_T``, shape ``(T + 1, ...)``; ``V_T`` bootstraps the tail.
    :param discount: ``g_t`` (discount times continuation), a scalar or broadcastable to ``reward``.
    :param lambd: the lambda of TD(lambda), a scalar or broadcastable to ``reward``.
    :param method: evaluation method of :func:`linear_recurrence`.
    :return: returns ``R_0 .. R_{T-1}``, shape of ``reward``.
    """
    if reward.ndim == 0 or value.shape != (reward.shape[0] + 1, *reward.shape[1:]):
        raise ValueError(
            f"value must be one step longer than reward: got value {tuple(value.shape)}, reward {tuple(reward.shape)}"
        )
    discount = torch.as_tensor(discount, dtype=reward.dtype, device=reward.device).expand_as(reward)
    lambd = torch.as_tensor(lambd, dtype=reward.dtype, device=reward.device).expand_as(reward)
    # Only the last step bootstraps fully from V_T; earlier ones mix V_{t+1} and R_{t+1}.
    tail = torch.cat([torch.zeros_like(value[1:-1]), value[-1:]], dim=0)
    inputs = reward + discount * ((1.0 - lambd) * value[1:] + lambd * tail)
    return linear_recurrence(discount * lambd, inputs, reverse=True, method=method)
