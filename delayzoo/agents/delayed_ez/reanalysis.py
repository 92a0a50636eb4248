"""A training round's value and policy targets, computed in the training thread, a thread, or a process.

:func:`compute_targets` is EfficientZero's reanalysis: values bootstrap from the target network (its
predicted values, or the root values of a search with it) and the first ``reanalyze_ratio`` of each batch
gets fresh policy targets from one batched search with it (normalised visits under pUCT, the improved policy
under Gumbel; the search adds its root noise, as EfficientZero and EfficientZero V2 do).
:class:`ThreadPrefetch` and :class:`ProcessPrefetch` run it on the next round's batches while the current
round trains (``DelayedEZ(prefetch=True | "process")``). A thread shares the GIL with the training
thread, so at small network sizes the two mostly take turns; :class:`ReanalysisWorker` is a CPU process
with its own copy of the target network that overlaps them for real. The two give the same training:
the worker computes the same targets, and it receives the replay generator's state with the batches and
returns it advanced by the search's noise, so the random stream is the one of the thread.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import weakref
from typing import Any

import numpy as np
import torch

from delayzoo.agents.common.parent_death import exit_with_parent
from delayzoo.agents.common.precision import autocast
from delayzoo.agents.delayed_ez.mcts import MCTS
from delayzoo.agents.delayed_ez.networks import EfficientZeroNetwork
from delayzoo.agents.delayed_ez.replay import ReplayBatch, stack_frames

__all__ = [
    "CPU_REANALYSIS_CHUNK",
    "ProcessPrefetch",
    "ReanalysisWorker",
    "Targets",
    "ThreadPrefetch",
    "batch_stacks",
    "compute_targets",
]

Targets = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""Value targets ``(B, K+1)``, policy targets ``(B, K+1, A)`` and policy masks ``(B, K+1)`` of one batch."""

CPU_REANALYSIS_CHUNK = 1024
"""Roots per reanalysis search on CPU (the per-root cost stops falling above about 1000 roots)."""


def batch_stacks(batch: ReplayBatch, offsets: np.ndarray, frame_stack: int, device: torch.device) -> torch.Tensor:
    """The batch's observations at ``offsets`` (``(B, M)`` frame offsets), stacked as the env returned them."""
    frames = torch.as_tensor(batch.frames, device=device)
    return stack_frames(frames, torch.as_tensor(offsets, device=device), frame_stack)


def _bootstrap_values(
    target_net: EfficientZeroNetwork,
    mcts: MCTS,
    observations: torch.Tensor,
    rng: np.random.Generator,
    size: int,
    use_root_value: bool,
) -> torch.Tensor:
    """``v(o_{t+n})`` of the bootstrap observations, ``size`` per network call: the target network's predicted
    values, or with ``use_root_value`` the root values of a search from them, with the root noise of the
    policy reanalysis (as EfficientZero's)."""
    values = []
    for start in range(0, len(observations), size):
        root = target_net.initial_inference(observations[start : start + size])
        if use_root_value:
            search = mcts.search(
                target_net, root.latent, root.policy_logits, rng, True, root_value_logits=root.value_logits
            )
            values.append(torch.as_tensor(search.root_values, dtype=torch.float32, device=observations.device))
        else:
            values.append(target_net.to_scalar(root.value_logits))
    return torch.cat(values)


@torch.no_grad()
def compute_targets(
    target_net: EfficientZeroNetwork,
    mcts: MCTS,
    batches: list[ReplayBatch],
    rng: np.random.Generator,
    *,
    frame_stack: int,
    reanalyze_ratio: float,
    chunk: int | None,
    device: torch.device,
    reanalyse_missing: bool = False,
    use_root_value: bool = False,
    mixed_precision: bool | str = False,
) -> list[Targets]:
    """The targets of each batch of a round (one batched search over all of the round's reanalysed roots).

    :param chunk: roots per network call and search; ``None``: all at once on a GPU,
        :data:`CPU_REANALYSIS_CHUNK` on a CPU
    :param rng: the search's Dirichlet noise and tie-breaks
    :param reanalyse_missing: also reanalyse the positions beyond the first ``reanalyze_ratio`` of a batch
        that have no stored search policy (under delay, those whose searches were rooted at a forecast)
    :param use_root_value: bootstrap the values from the root values of a search with ``target_net`` (with root
        noise, as EfficientZero)
    :param mixed_precision: the networks' autocast (:func:`~delayzoo.agents.common.precision.autocast`); the
        targets are float32 either way
    """

    def chunk_size(total: int) -> int:
        if chunk is not None:
            return chunk
        return max(total, 1) if device.type != "cpu" else CPU_REANALYSIS_CHUNK

    flat = torch.cat([batch_stacks(b, b.bootstrap_offset, frame_stack, device).flatten(0, 1) for b in batches])
    with autocast(device, mixed_precision):
        bootstrap = _bootstrap_values(target_net, mcts, flat, rng, chunk_size(len(flat)), use_root_value)
    out = []
    roots, where = [], []
    for index, batch in enumerate(batches):
        rows_in_batch, width = batch.returns.shape
        values = torch.as_tensor(batch.returns, device=device) + torch.as_tensor(
            batch.bootstrap_discount, device=device
        ) * bootstrap[index * rows_in_batch * width : (index + 1) * rows_in_batch * width].view(rows_in_batch, width)
        policies = torch.as_tensor(batch.stored_policy, device=device)
        mask = torch.as_tensor(batch.stored_policy_mask, device=device)
        out.append((values, policies, mask))
        num_reanalyzed = int(round(reanalyze_ratio * rows_in_batch))
        chosen = np.zeros_like(batch.policy_valid)
        chosen[:num_reanalyzed] = True
        if reanalyse_missing:
            chosen |= batch.stored_policy_mask == 0
        rows, cols = np.nonzero(batch.policy_valid & chosen)
        if len(rows):
            stacks = batch_stacks(batch, batch.policy_offset, frame_stack, device)
            roots.append(stacks[torch.as_tensor(rows), torch.as_tensor(cols)])
            where.append((index, rows, cols))
    if roots:
        root_obs = torch.cat(roots)
        size = chunk_size(len(root_obs))
        weights = []
        with autocast(device, mixed_precision):
            for start in range(0, len(root_obs), size):
                root = target_net.initial_inference(root_obs[start : start + size])
                search = mcts.search(
                    target_net, root.latent, root.policy_logits, rng, True,
                    root_value_logits=root.value_logits,
                )
                weights.append(torch.as_tensor(search.policy, dtype=torch.float32, device=device))
        targets = torch.cat(weights)
        targets = targets / targets.sum(dim=1, keepdim=True)
        start = 0
        for index, rows, cols in where:
            _, policies, mask = out[index]
            policies[rows, cols] = targets[start : start + len(rows)]
            mask[rows, cols] = 1.0
            start += len(rows)
    return out


class ThreadPrefetch:
    """The next round's batches and a thread computing their targets with ``compute(batches)``."""

    def __init__(self, batches: list[ReplayBatch], compute) -> None:
        self.batches = batches
        self.targets: list[Targets] | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(compute,), daemon=True)
        self._thread.start()

    def _run(self, compute) -> None:
        try:
            self.targets = compute(self.batches)
        except BaseException as error:  # re-raised in the training thread by result()
            self.error = error

    def wait(self) -> None:
        """Block until the targets are computed."""
        self._thread.join()

    def result(self) -> tuple[list[ReplayBatch], list[Targets]]:
        """The batches and their targets (re-raises an error of the thread)."""
        self.wait()
        if self.error is not None:
            raise self.error
        assert self.targets is not None
        return self.batches, self.targets


def _serve(
    connection, target_net: EfficientZeroNetwork, mcts: MCTS, settings: dict[str, Any], parent: int, kernel: bool
) -> None:
    """The worker's loop: ``(batches, rng state, weights or None)`` in, ``(targets, rng state, CPU s)`` out.

    ``parent`` and ``kernel``: the training process's pid, and whether it started the worker from its main
    thread (see :func:`~delayzoo.agents.common.parent_death.exit_with_parent`).
    """
    torch.set_num_threads(1)  # a forked child must not enter the parent's OpenMP pool (it can hang)
    # the training process handles Ctrl-C (and then closes the pipe); a terminate ends the worker quietly,
    # whatever handlers it inherited (the zoo saves the model on SIGTERM), and so does the training
    # process's death, however it dies (a forked worker holds both ends of the pipe: it would wait forever)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    exit_with_parent(parent, signal.SIGTERM, kernel=kernel)
    device = torch.device("cpu")
    rng = np.random.default_rng()
    while True:
        try:
            batches, rng_state, weights = connection.recv()
        except (EOFError, OSError):  # the training process closed its end or exited
            return
        try:
            if weights is not None:
                target_net.load_state_dict({name: torch.from_numpy(value) for name, value in weights.items()})
            rng.bit_generator.state = rng_state
            targets = compute_targets(target_net, mcts, batches, rng, device=device, **settings)
            reply: Any = ([tuple(t.numpy() for t in batch) for batch in targets], rng.bit_generator.state)
        except BaseException as error:  # sent back and re-raised in the training process
            reply = error
        connection.send((reply, time.process_time()))


def _stop(connection, process) -> None:
    connection.close()
    process.join(timeout=5)
    if process.is_alive():
        process.terminate()


class ReanalysisWorker:
    """A CPU process with its own copy of the target network, computing targets for :class:`ProcessPrefetch`.

    It is forked where the platform allows it (no re-import, and the training script is not run again),
    spawned elsewhere, and runs one torch thread. It stops when this object is garbage-collected or the
    training process exits or dies (SIGKILL included).

    :param target_net: the target network (copied into the worker; :meth:`submit` sends new weights)
    :param mcts: the search
    :param settings: the keywords of :func:`compute_targets` other than the networks, batches, generator
        and device (``frame_stack``, ``reanalyze_ratio``, ``chunk``, ``use_root_value``, ...)
    """

    def __init__(self, target_net: EfficientZeroNetwork, mcts: MCTS, settings: dict[str, Any]) -> None:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        context = multiprocessing.get_context(method)
        self._connection, child = context.Pipe()
        kernel = threading.current_thread() is threading.main_thread()
        self._process = context.Process(
            target=_serve, args=(child, target_net, mcts, dict(settings), os.getpid(), kernel),
            name="delayzoo-reanalysis", daemon=True,
        )
        self._process.start()
        child.close()
        self.cpu_seconds = 0.0
        """Process CPU time the worker had used at its last reply."""
        self._finalizer = weakref.finalize(self, _stop, self._connection, self._process)

    def submit(self, batches: list[ReplayBatch], rng_state: dict, weights: dict[str, np.ndarray] | None) -> None:
        """Start computing ``batches``' targets (``weights``: the target network's new state, if it changed)."""
        self._connection.send((batches, rng_state, weights))

    def receive(self) -> tuple[list[tuple[np.ndarray, ...]], dict]:
        """The targets of the last submitted batches and the generator state after their search."""
        reply, self.cpu_seconds = self._connection.recv()
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def close(self) -> None:
        """Stop the worker."""
        self._finalizer()


class ProcessPrefetch:
    """The next round's batches, their targets computed by a :class:`ReanalysisWorker`.

    ``rng`` (the replay generator) is handed over: :meth:`wait` sets it to the state the search left it in.
    """

    def __init__(
        self,
        batches: list[ReplayBatch],
        worker: ReanalysisWorker,
        rng: np.random.Generator,
        weights: dict[str, np.ndarray] | None,
        device: torch.device,
    ) -> None:
        self.batches = batches
        self._worker, self._rng, self._device = worker, rng, device
        self._targets: list[Targets] | None = None
        self._error: BaseException | None = None
        worker.submit(batches, rng.bit_generator.state, weights)

    def wait(self) -> None:
        """Block until the worker replies (once)."""
        if self._targets is not None or self._error is not None:
            return
        try:
            arrays, state = self._worker.receive()
        except BaseException as error:  # re-raised by result()
            self._error = error
            return
        self._rng.bit_generator.state = state
        self._targets = [tuple(torch.as_tensor(a, device=self._device) for a in batch) for batch in arrays]

    def result(self) -> tuple[list[ReplayBatch], list[Targets]]:
        """The batches and their targets (re-raises an error of the worker)."""
        self.wait()
        if self._error is not None:
            raise self._error
        assert self._targets is not None
        return self.batches, self._targets
