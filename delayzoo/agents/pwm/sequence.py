"""PWM's sequence model (PaMoRL's "PSSM"): an input layer and a stack of token-mixed linear-recurrence cells.

Each cell keeps ONE ``K x V`` matrix memory (``K = V = width / divisor``: 128 x 128 at width 512) and the
previous step's input (for the token mix). With ``x_t`` the cell input and ``x_{t-1}`` the previous one
(zero after a reset):

- forget gate ``f_t = sigmoid(W_f (w * x_t + (1 - w) * x_{t-1}))`` with ``w = sigmoid(mu + 1)`` per channel;
- ``q, k = elu(.) + 1`` and ``v = sigmoid(r) * v`` from one projection of ``x_t``;
- memory ``S_t = diag(f_t) S_{t-1} + k_t v_t^T`` (restarted at ``is_first``), read-out ``q_t^T S_t``,
  RMS-normalised and projected back to the width;
- post-norm residual ``y = LN(x + drop(u))``, then a mish-gated feed-forward with its own post-norm
  residual ``LN(y + drop(x' * mish(g)))``.

The window pass evaluates the memory recurrence with :func:`matrix_memory` (one fused loop over time on
CPU, a parallel scan elsewhere) and writes the memories straight into the buffer the imagination
starts from, so no state is copied or cloned between the world-model update and imagination.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from delayzoo.agents.common.scan import _resolve_method, linear_recurrence

RecurrentState = dict[str, torch.Tensor]
"""``matrix`` (B, cells, K, V), ``last_input`` (B, cells, D) and ``readout`` (B, D), the output ``h``."""


class RMSNorm(nn.Module):
    """Root-mean-square normalisation over the last dimension (in float32) with a learned gain."""

    def __init__(self, size: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x.float()
        return (y * torch.rsqrt(y.square().mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class _SequentialMatrixMemory(torch.autograd.Function):
    """``S_t = f_t S_{t-1} + k_t v_t^T``, ``o_t = q_t^T S_t`` in one loop over time, writing ``S`` into a buffer.

    The backward pass carries ``dL/dS_t`` as one ``(B, K, V)`` tensor backwards through time, so neither
    ``k v^T`` nor the gradient of the memories is ever materialised over the window.
    """

    @staticmethod
    def forward(ctx, forget, key, value, query, initial, memories, reset):
        with torch.no_grad():
            steps = key.shape[0]
            memories[0].copy_(initial)
            for t in range(steps):
                out = memories[t + 1]
                torch.mul(memories[t], forget[t].unsqueeze(-1), out=out)
                out.addcmul_(key[t].unsqueeze(-1), value[t].unsqueeze(-2))
            read = torch.matmul(query.unsqueeze(-2), memories[1:]).squeeze(-2)
            # memories[t] becomes the state *before* step t (zero where it restarts); keep the overwritten
            # S_{t-1} of those rows for the query gradient.
            where = reset.nonzero(as_tuple=True)
            saved = memories[where].clone()
            memories[where] = 0.0
        ctx.save_for_backward(forget, key, value, query, saved, *where)
        # Not saved_tensors: the other cells write their own slices of the same buffer, which would trip
        # autograd's version check although these slices stay untouched until the backward pass.
        ctx.memories = memories
        return read

    @staticmethod
    def backward(ctx, grad_read):
        forget, key, value, query, saved, *where = ctx.saved_tensors
        memories = ctx.memories
        steps = key.shape[0]
        grad_query = torch.matmul(memories[1:], grad_read.unsqueeze(-1)).squeeze(-1)
        if saved.numel():  # memories[t + 1] = S_t except where step t + 1 restarts: S_t was saved
            valid = where[0] >= 1
            steps_before, rows = where[0][valid] - 1, where[1][valid]
            grad_query[steps_before, rows] = torch.matmul(
                saved[valid], grad_read[steps_before, rows].unsqueeze(-1)
            ).squeeze(-1)
        grad_forget = torch.empty_like(forget)
        grad_key = torch.empty_like(key)
        grad_value = torch.empty_like(value)
        carry = torch.zeros_like(memories[0])
        for t in range(steps - 1, -1, -1):
            if t < steps - 1:
                carry.mul_(forget[t + 1].unsqueeze(-1))
            carry.addcmul_(query[t].unsqueeze(-1), grad_read[t].unsqueeze(-2))
            grad_key[t] = torch.matmul(carry, value[t].unsqueeze(-1)).squeeze(-1)
            grad_value[t] = torch.matmul(key[t].unsqueeze(-2), carry).squeeze(-2)
            # S_{t-1}: memories[t], except where step t restarts (its forget gate is zero there anyway).
            grad_forget[t] = (carry * memories[t]).sum(-1)
        grad_initial = carry * forget[0].unsqueeze(-1)
        return grad_forget, grad_key, grad_value, grad_query, grad_initial, None, None


def matrix_memory(
    forget: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    query: torch.Tensor,
    initial: torch.Tensor,
    reset: torch.Tensor,
    memories: torch.Tensor,
    method: str = "auto",
) -> torch.Tensor:
    """Run a window of ``S_t = diag(f_t) S_{t-1} + k_t v_t^T`` and read ``q_t^T S_t`` at every step.

    :param forget: gates ``(T, B, K)``, already zero where the memory restarts.
    :param key: keys ``(T, B, K)``; ``value``: ``(T, B, V)``; ``query``: ``(T, B, K)``.
    :param initial: the memory before the window ``(B, K, V)``.
    :param reset: ``(T, B)`` booleans, true where the memory restarts before step ``t``.
    :param memories: a ``(T + 1, B, K, V)`` buffer (may be a strided view); on return ``memories[t]`` is the
        memory before step ``t``, zero where ``reset[t]``, and ``memories[T]`` the memory after the window.
        Its contents are detached; do not modify them before the backward pass.
    :param method: ``"sequential"`` (a fused loop), ``"parallel"`` (:func:`linear_recurrence`'s scan) or
        ``"auto"`` (sequential on CPU).
    :return: the reads ``(T, B, V)``.
    """
    # The memory runs in float32, also under autocast: it accumulates over the whole window.
    forget, key, value, query = (x.to(memories.dtype) for x in (forget, key, value, query))
    with torch.autocast(key.device.type, enabled=False):
        if _resolve_method(method, key) == "sequential":
            return _SequentialMatrixMemory.apply(forget, key, value, query, initial, memories, reset)
        return _parallel_matrix_memory(forget, key, value, query, initial, reset, memories)


def _parallel_matrix_memory(
    forget: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    query: torch.Tensor,
    initial: torch.Tensor,
    reset: torch.Tensor,
    memories: torch.Tensor,
) -> torch.Tensor:
    """:func:`matrix_memory` by :func:`linear_recurrence`'s parallel scan (materialises ``k v^T`` and ``S``)."""
    update = key.unsqueeze(-1) * value.unsqueeze(-2)
    update = torch.cat([update[:1] + forget[:1].unsqueeze(-1) * initial, update[1:]], dim=0)
    states = linear_recurrence(forget.unsqueeze(-1), update, method="parallel")
    with torch.no_grad():
        memories[0].copy_(initial)
        memories[1:].copy_(states)
        memories[:-1][reset] = 0.0
    return torch.matmul(query.unsqueeze(-2), states).squeeze(-2)


def _write_and_read(
    matrix: torch.Tensor,
    forget: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    query: torch.Tensor,
    in_place: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``S' = diag(f) S + k v^T`` from ``matrix`` ``(B, K, V)`` (written into it when ``in_place``), and the
    read ``q^T S'`` ``(B, V)``."""
    memory = matrix.mul_(forget.unsqueeze(-1)) if in_place else matrix * forget.unsqueeze(-1)
    memory.addcmul_(key.unsqueeze(-1), value.unsqueeze(-2))
    return memory, torch.matmul(query.unsqueeze(-2), memory).squeeze(-2)


@torch.library.custom_op(
    "delayzoo::pwm_memory_step",
    mutates_args=("matrix",),
    schema="(Tensor(a!) matrix, Tensor forget, Tensor key, Tensor value, Tensor query) -> Tensor",
)
def memory_step(
    matrix: torch.Tensor, forget: torch.Tensor, key: torch.Tensor, value: torch.Tensor, query: torch.Tensor
) -> torch.Tensor:
    """One step of the memory, written into ``matrix`` (no autograd), and its read, for compiled rollouts.

    An operator of its own so that ``torch.compile`` keeps it whole: inductor turns the small batched
    matmul of the read into a generated loop that ran about 5x slower than torch's kernel on our CPUs.
    """
    return _write_and_read(matrix, forget, key, value, query, in_place=True)[1]


@memory_step.register_fake
def _(matrix: torch.Tensor, forget: torch.Tensor, key: torch.Tensor, value: torch.Tensor, query: torch.Tensor):
    return query.new_empty((*query.shape[:-1], matrix.shape[-1]))


def _token_shift(x: torch.Tensor, previous: torch.Tensor, reset: torch.Tensor) -> torch.Tensor:
    """``x[t-1]`` for every ``t`` (``previous`` before the window), zero where ``reset[t]``."""
    shifted = torch.cat([previous.unsqueeze(0), x[:-1]], dim=0)
    return shifted.masked_fill(reset.unsqueeze(-1), 0.0)


def _mix_init(width: int) -> torch.Tensor:
    """The reference's token-mix logits: a normal of std ``sqrt(2 / (width + 1)) / 0.8796``, clipped at 2 std."""
    std = math.sqrt(2.0 / (width + 1)) / 0.87962566103423978
    return (torch.randn(width) * std).clamp(-2 * std, 2 * std)


class GatedFeedForward(nn.Module):
    """``LN(x + drop(a * mish(g)))`` with ``(a, g) = Linear(x)``: the reference's gating layer.

    :param width: input and output size.
    :param dropout: dropout of the residual branch (training only).
    """

    def __init__(self, width: int, dropout: float) -> None:
        super().__init__()
        self.linear = nn.Linear(width, 2 * width)
        self.norm = nn.LayerNorm(width)
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden, gate = self.linear(x).chunk(2, dim=-1)
        return self.norm(x + F.dropout(hidden * F.mish(gate), self.dropout, self.training))


class SequenceCell(nn.Module):
    """One cell: the token-mixed matrix-memory recurrence, then the gated feed-forward (module docstring).

    :param width: model width ``D``.
    :param state_size: key and value size ``K = V`` (``width / divisor``).
    :param dropout: dropout of both residual branches and of whole steps of the recurrence (training only).
    :param readout_norm: RMS-normalise the read-out (the reference's Atari model does, its DMC model not).
    """

    def __init__(self, width: int, state_size: int, dropout: float, readout_norm: bool) -> None:
        super().__init__()
        self.width, self.state_size, self.dropout = width, state_size, dropout
        self.mix = nn.Parameter(_mix_init(width))
        self.forget = nn.Linear(width, state_size, bias=False)
        self.project = nn.Linear(width, 4 * state_size, bias=False)  # query, key, value gate, value
        self.readout_norm = RMSNorm(state_size) if readout_norm else nn.Identity()
        self.output = nn.Linear(state_size, width, bias=False)
        self.norm = nn.LayerNorm(width)
        self.ffn = GatedFeedForward(width, dropout)

    def _components(self, x: torch.Tensor, previous: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Forget gate, query, key and value of inputs ``x`` and previous inputs (any leading shape)."""
        weight = torch.sigmoid(self.mix + 1.0)
        forget = torch.sigmoid(self.forget(previous + weight * (x - previous)))
        query_key, gate, value = self.project(x).split([2 * self.state_size, self.state_size, self.state_size], -1)
        query, key = (F.elu(query_key) + 1.0).chunk(2, dim=-1)
        value = torch.sigmoid(gate) * value
        if self.training and self.dropout > 0:
            # A dropped step neither decays nor writes the memory (the reference also rescaled the kept
            # steps by 1 / (1 - p), which turns small forget gates negative).
            keep = (torch.rand_like(x[..., :1]) >= self.dropout).to(x.dtype)
            forget = 1.0 + (forget - 1.0) * keep
            value = value * keep
        return forget, query, key, value

    def _finish(self, x: torch.Tensor, read: torch.Tensor) -> torch.Tensor:
        return self.ffn(self.norm(x + F.dropout(self.output(self.readout_norm(read)), self.dropout, self.training)))

    def forward(
        self,
        x: torch.Tensor,
        reset: torch.Tensor,
        matrix: torch.Tensor,
        last_input: torch.Tensor,
        memories: torch.Tensor,
        method: str = "auto",
    ) -> torch.Tensor:
        """Window pass over inputs ``(T, B, D)`` from ``matrix`` ``(B, K, V)`` and ``last_input`` ``(B, D)``.

        :param reset: ``(T, B)`` booleans, true where the memory restarts before step ``t``.
        :param memories: ``(T + 1, B, K, V)`` buffer filled as :func:`matrix_memory` says.
        :return: outputs ``(T, B, D)``.
        """
        forget, query, key, value = self._components(x, _token_shift(x, last_input, reset))
        forget = forget.masked_fill(reset.unsqueeze(-1), 0.0)
        read = matrix_memory(forget, key, value, query, matrix, reset, memories, method)
        return self._finish(x, read)

    def step(
        self, x: torch.Tensor, matrix: torch.Tensor, last_input: torch.Tensor, in_place: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One step from ``(B, D)`` inputs and the state after the previous step (resets are the caller's).

        :param in_place: update ``matrix`` itself (rollouts without autograd) instead of a new tensor.
        :return: the output ``(B, D)`` and the new memory.
        """
        forget, query, key, value = (part.to(matrix.dtype) for part in self._components(x, last_input))
        with torch.autocast(x.device.type, enabled=False):  # the memory stays float32, as in forward
            if in_place and torch.compiler.is_compiling():
                memory, read = matrix, memory_step(matrix, forget, key, value, query)
            else:
                memory, read = _write_and_read(matrix, forget, key, value, query, in_place)
        return self._finish(x, read), memory


class SequenceModel(nn.Module):
    """The input layer over ``[z_t, a_t]`` and a stack of :class:`SequenceCell`; its output is ``h_t``.

    :param input_size: size of the flattened latent plus the action encoding.
    :param width: model width (512 in the paper).
    :param cells: number of cells (2 in the paper).
    :param divisor: key and value size is ``width // divisor`` (4 on Atari: one 128 x 128 memory per cell).
    :param dropout: dropout inside the cells during training (0.1 in the paper).
    :param readout_norm: RMS-normalise each cell's read-out (Atari: yes, DMC: no).
    :param tanh: squash ``h`` with ``tanh`` (the reference's DMC model).
    """

    def __init__(
        self,
        input_size: int,
        width: int,
        cells: int,
        divisor: int = 4,
        dropout: float = 0.1,
        readout_norm: bool = True,
        tanh: bool = False,
    ) -> None:
        super().__init__()
        if divisor < 1 or width % divisor != 0:
            raise ValueError(f"seq_width={width} must be a multiple of seq_divisor={divisor}")
        self.width, self.cells, self.state_size, self.tanh = width, cells, width // divisor, tanh
        self.embed = nn.Sequential(
            nn.Linear(input_size, width, bias=False),
            nn.LayerNorm(width),
            nn.SiLU(),
            nn.Linear(width, width, bias=False),
            nn.LayerNorm(width),
        )
        self.layers = nn.ModuleList(SequenceCell(width, self.state_size, dropout, readout_norm) for _ in range(cells))

    def initial_state(self, batch: int, device: torch.device | str = "cpu") -> RecurrentState:
        """The all-zero state of an episode start."""
        zeros = lambda *shape: torch.zeros(batch, *shape, device=device)  # noqa: E731
        return {
            "matrix": zeros(self.cells, self.state_size, self.state_size),
            "last_input": zeros(self.cells, self.width),
            "readout": zeros(self.width),
        }

    def forward(
        self, inputs: torch.Tensor, reset: torch.Tensor, state: RecurrentState, method: str = "auto"
    ) -> tuple[torch.Tensor, RecurrentState, RecurrentState]:
        """Window pass.

        :param inputs: ``(T, B, input_size)``.
        :param reset: ``(T, B)`` booleans (``is_first``).
        :param state: the state before the window (see :data:`RecurrentState`).
        :param method: :func:`matrix_memory` method.
        :return: ``h`` ``(T, B, D)``; the states *before* every step, detached, with a leading ``T``
            (zero where ``reset``: the imagination starts; ``matrix`` is a view of a buffer the caller now
            owns, valid to modify once the backward pass is done); and the state after the window.
        """
        steps, batch = reset.shape
        keep = (~reset).unsqueeze(-1).to(inputs.dtype)
        buffer = state["matrix"].new_empty(steps + 1, batch, self.cells, self.state_size, self.state_size)
        before, after = [], []
        x = self.embed(inputs)
        for index, layer in enumerate(self.layers):
            previous = state["last_input"][:, index]
            before.append(torch.cat([previous.unsqueeze(0), x[:-1].detach()], dim=0) * keep)
            after.append(x[-1].detach())
            x = layer(x, reset, state["matrix"][:, index], previous, buffer[:, :, index], method)
        h = torch.tanh(x) if self.tanh else x
        readout = torch.cat([state["readout"].unsqueeze(0), h[:-1].detach()], dim=0) * keep
        starts = {
            "matrix": buffer[:-1],
            "last_input": torch.stack(before, dim=2),
            "readout": readout,
        }
        final = {
            "matrix": buffer[-1],
            "last_input": torch.stack(after, dim=1),
            "readout": h[-1].detach(),
        }
        return h, starts, final

    def step(
        self, inputs: torch.Tensor, reset: torch.Tensor | None, state: RecurrentState, in_place: bool = False
    ) -> tuple[torch.Tensor, RecurrentState]:
        """One step from ``inputs`` ``(B, input_size)``, restarting rows where ``reset`` ``(B,)`` is true.

        :param in_place: overwrite ``state["matrix"]`` with the new memory instead of allocating one
            (for long rollouts without autograd, e.g. imagination).
        :return: ``h`` ``(B, D)`` and the new state.
        """
        if in_place and torch.is_grad_enabled():
            raise ValueError("in_place steps are for rollouts without autograd: use torch.no_grad()")
        matrix, last_input = state["matrix"], state["last_input"]
        if reset is not None and bool(reset.any()):
            keep = (~reset).to(inputs.dtype)
            matrix = matrix.mul_(keep.view(-1, 1, 1, 1)) if in_place else matrix * keep.view(-1, 1, 1, 1)
            last_input = last_input * keep.view(-1, 1, 1)
        x = self.embed(inputs)
        memories, inputs_seen = [], []
        for index, layer in enumerate(self.layers):
            inputs_seen.append(x)
            x, memory = layer.step(x, matrix[:, index], last_input[:, index], in_place=in_place)
            memories.append(memory)
        h = torch.tanh(x) if self.tanh else x
        return h, {
            "matrix": matrix if in_place else torch.stack(memories, dim=1),
            "last_input": torch.stack(inputs_seen, dim=1),
            "readout": h,
        }
