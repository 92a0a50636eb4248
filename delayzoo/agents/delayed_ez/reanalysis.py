"""DelayedEZ's reanalysis part: a training round's value and policy targets, computed in the training thread, a
thread, a process or a Ray actor.

:class:`Reanalysis` (the target network, the search and a :class:`ReanalysisConfig`) is what the learner and
each reanalysis actor hold; :func:`compute_targets` is EfficientZero's reanalysis: values bootstrap from the
target network (its predicted values, or the root values of a search with it) and the first ``reanalyze_ratio``
of each batch gets fresh policy targets from one batched search with it (normalised visits under pUCT, the
improved policy under Gumbel; the search adds its root noise, as EfficientZero and EfficientZero V2 do). With
``consistency_filter`` (EfficientZero V2's) a fresh target whose top action is not the one the search selected is
dropped; :class:`ReanalysisCounts` says how many targets a round reanalysed, overturned and dropped.
:class:`ThreadPrefetch` and :class:`ProcessPrefetch` run it on the next round's batches while the current
round trains (``DelayedEZ(prefetch=True | "process")``). A thread shares the GIL with the training
thread, so at small network sizes the two mostly take turns; :class:`ReanalysisWorker` is a CPU process
with its own copy of the target network that overlaps them for real. The two give the same training:
the worker computes the same targets, and it receives the replay generator's state with the batches and
returns it advanced by the search's noise, so the random stream is the one of the thread.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
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
    "Reanalysis",
    "ReanalysisConfig",
    "ReanalysisCounts",
    "ReanalysisWorker",
    "RoundTargets",
    "Targets",
    "ThreadPrefetch",
    "batch_stacks",
    "compute_targets",
]

Targets = tuple[torch.Tensor, torch.Tensor, torch.Tensor]
"""Value targets ``(B, K+1)``, policy targets ``(B, K+1, A)`` and policy masks ``(B, K+1)`` of one batch."""

CPU_REANALYSIS_CHUNK = 1024
"""Roots per reanalysis search on CPU (the per-root cost stops falling above about 1000 roots)."""


@dataclasses.dataclass
class ReanalysisCounts:
    """What reanalysis did to the policy targets of a round's batches, for the logs (:meth:`record`).

    :param reanalysed: fresh search targets
    :param compared: of them, those at positions with a stored search target
    :param overturned: of those, the targets whose top action differs from the stored target's
    :param dropped: the targets the consistency filter dropped
    :param actions: per action, the fresh targets whose top action it is
    """

    reanalysed: int = 0
    compared: int = 0
    overturned: int = 0
    dropped: int = 0
    actions: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def count(self, stored: np.ndarray, stored_mask: np.ndarray, top: np.ndarray, kept: np.ndarray) -> None:
        """Add fresh targets: the stored targets ``(N, A)`` and masks ``(N,)`` at their positions, their top
        actions ``(N,)`` and whether the filter kept each ``(N,)``."""
        compared = stored_mask > 0
        self.reanalysed += len(top)
        self.compared += int(compared.sum())
        self.overturned += int((stored[compared].argmax(axis=-1) != top[compared]).sum())
        self.dropped += int((~kept).sum())
        self.add_actions(np.bincount(top, minlength=stored.shape[-1]))

    def add_actions(self, actions: np.ndarray) -> None:
        """Add per-action counts (the longer of the two sets the length)."""
        size = max(len(self.actions), len(actions))
        self.actions = np.pad(self.actions, (0, size - len(self.actions))) + np.pad(actions, (0, size - len(actions)))

    def record(self, logger: Any, consistency_filter: bool) -> None:
        """Log the shares: ``reanalysis/overturned`` (of the fresh targets with a stored one),
        ``reanalysis/action_share_<a>`` per action, and with the filter ``reanalysis/dropped``; nothing when no
        target was reanalysed."""
        if self.reanalysed == 0:
            return
        if self.compared:
            logger.record("reanalysis/overturned", self.overturned / self.compared)
        for action, count in enumerate(self.actions.tolist()):
            logger.record(f"reanalysis/action_share_{action}", count / self.reanalysed)
        if consistency_filter:
            logger.record("reanalysis/dropped", self.dropped / self.reanalysed)


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


def _search_targets(
    target_net: EfficientZeroNetwork,
    mcts: MCTS,
    root_obs: torch.Tensor,
    rng: np.random.Generator,
    chunk_size: Callable[[int], int],
    mixed_precision: bool | str,
) -> tuple[torch.Tensor, np.ndarray]:
    """Fresh policy targets ``(N, A)`` (normalised) of the roots ``root_obs``, from a search with root noise,
    and the action each search selected ``(N,)``."""
    size = chunk_size(len(root_obs))
    weights, selected = [], []
    with autocast(root_obs.device, mixed_precision):
        for start in range(0, len(root_obs), size):
            root = target_net.initial_inference(root_obs[start : start + size])
            search = mcts.search(
                target_net, root.latent, root.policy_logits, rng, True, root_value_logits=root.value_logits
            )
            weights.append(torch.as_tensor(search.policy, dtype=torch.float32, device=root_obs.device))
            selected.append(search.actions)
    targets = torch.cat(weights)
    return targets / targets.sum(dim=1, keepdim=True), np.concatenate(selected)


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
    consistency_filter: bool = False,
    counts: ReanalysisCounts | None = None,
) -> list[Targets]:
    """The targets of each batch of a round (one batched search over all of the round's reanalysed roots),
    in new tensors (the batches' stored arrays are left as they are).

    :param chunk: roots per network call and search; ``None``: all at once on a GPU,
        :data:`CPU_REANALYSIS_CHUNK` on a CPU
    :param rng: the search's Dirichlet noise and tie-breaks
    :param reanalyse_missing: also reanalyse the positions beyond the first ``reanalyze_ratio`` of a batch
        that have no stored search policy (under delay, those whose searches were rooted at a forecast)
    :param use_root_value: bootstrap the values from the root values of a search with ``target_net`` (with root
        noise, as EfficientZero)
    :param mixed_precision: the networks' autocast (:func:`~delayzoo.agents.common.precision.autocast`); the
        targets are float32 either way
    :param consistency_filter: drop (mask out) a fresh target whose top action differs from the action its search
        selected (EfficientZero V2's filter; under pUCT the two agree by construction)
    :param counts: where to add what the reanalysis did (:class:`ReanalysisCounts`)
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
        policies = torch.tensor(batch.stored_policy, device=device)  # copies: the batch's arrays stay as stored
        mask = torch.tensor(batch.stored_policy_mask, device=device)
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
        targets, selected = _search_targets(target_net, mcts, torch.cat(roots), rng, chunk_size, mixed_precision)
        top = targets.argmax(dim=1).cpu().numpy()
        kept = top == selected if consistency_filter else np.ones(len(top), dtype=bool)
        start = 0
        for index, rows, cols in where:
            _, policies, mask = out[index]
            part = slice(start, start + len(rows))
            policies[rows, cols] = targets[part]
            mask[rows, cols] = torch.as_tensor(kept[part], dtype=mask.dtype, device=device)
            if counts is not None:
                stored = batches[index]
                counts.count(stored.stored_policy[rows, cols], stored.stored_policy_mask[rows, cols], top[part],
                             kept[part])
            start += len(rows)
    return out


@dataclasses.dataclass(frozen=True)
class ReanalysisConfig:
    """The keywords of :func:`compute_targets` that come from the model's settings.

    :param frame_stack: frames per observation
    :param reanalyze_ratio: share of each batch whose policy targets come from a fresh search
    :param chunk: roots per network call and search (``None``: by device)
    :param reanalyse_missing: also reanalyse the positions without a stored search policy
    :param use_root_value: bootstrap from the root values of a search
    :param mixed_precision: the networks' autocast
    :param consistency_filter: drop the fresh targets whose top action is not the searched one
    """

    frame_stack: int = 1
    reanalyze_ratio: float = 0.99
    chunk: int | None = None
    reanalyse_missing: bool = False
    use_root_value: bool = False
    mixed_precision: bool | str = False
    consistency_filter: bool = False


class Reanalysis:
    """The targets of a round's batches from a target network and a search (the learner's, or an actor's copy).

    :param target_network: the target network
    :param mcts: the search
    :param config: how the targets are built
    :param device: where the targets are computed
    """

    def __init__(
        self, target_network: EfficientZeroNetwork, mcts: MCTS, config: ReanalysisConfig, device: torch.device
    ) -> None:
        self.target_network, self.mcts, self.config, self.device = target_network, mcts, config, device

    def targets(
        self, batches: list[ReplayBatch], rng: np.random.Generator, counts: ReanalysisCounts | None = None
    ) -> list[Targets]:
        """The targets of ``batches`` (``rng``: the search's noise and tie-breaks; advanced by it; ``counts``: where
        to add what the reanalysis did)."""
        return compute_targets(
            self.target_network, self.mcts, batches, rng, device=self.device, counts=counts,
            **dataclasses.asdict(self.config),
        )


class ThreadPrefetch:
    """The next round's batches and a thread computing their targets with ``compute(batches, counts)``."""

    def __init__(self, batches: list[ReplayBatch], compute) -> None:
        self.batches = batches
        self.targets: list[Targets] | None = None
        self.counts = ReanalysisCounts()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(compute,), daemon=True)
        self._thread.start()

    def _run(self, compute) -> None:
        try:
            self.targets = compute(self.batches, self.counts)
        except BaseException as error:  # re-raised in the training thread by result()
            self.error = error

    def wait(self) -> None:
        """Block until the targets are computed."""
        self._thread.join()

    def result(self) -> tuple[list[ReplayBatch], list[Targets], ReanalysisCounts]:
        """The batches, their targets and what the reanalysis did (re-raises an error of the thread)."""
        self.wait()
        if self.error is not None:
            raise self.error
        assert self.targets is not None
        return self.batches, self.targets, self.counts


def _serve(
    connection, target_net: EfficientZeroNetwork, mcts: MCTS, config: ReanalysisConfig, parent: int, kernel: bool
) -> None:
    """The worker's loop: ``(batches, rng state, weights or None)`` in, ``((targets, rng state, counts), CPU s)``
    out.

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
    reanalysis = Reanalysis(target_net, mcts, config, torch.device("cpu"))
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
            counts = ReanalysisCounts()
            targets = reanalysis.targets(batches, rng, counts)
            reply: Any = ([tuple(t.numpy() for t in batch) for batch in targets], rng.bit_generator.state, counts)
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

    :param reanalysis: the learner's reanalysis (its target network is copied into the worker, its search and
        config used there; :meth:`submit` sends new weights)
    """

    def __init__(self, reanalysis: Reanalysis) -> None:
        method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
        context = multiprocessing.get_context(method)
        self._connection, child = context.Pipe()
        kernel = threading.current_thread() is threading.main_thread()
        self._process = context.Process(
            target=_serve,
            args=(child, reanalysis.target_network, reanalysis.mcts, reanalysis.config, os.getpid(), kernel),
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

    def receive(self) -> tuple[list[tuple[np.ndarray, ...]], dict, ReanalysisCounts]:
        """The targets of the last submitted batches, the generator state after their search and what the
        reanalysis did."""
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
        self._counts = ReanalysisCounts()
        self._error: BaseException | None = None
        worker.submit(batches, rng.bit_generator.state, weights)

    def wait(self) -> None:
        """Block until the worker replies (once)."""
        if self._targets is not None or self._error is not None:
            return
        try:
            arrays, state, self._counts = self._worker.receive()
        except BaseException as error:  # re-raised by result()
            self._error = error
            return
        self._rng.bit_generator.state = state
        self._targets = [tuple(torch.as_tensor(a, device=self._device) for a in batch) for batch in arrays]

    def result(self) -> tuple[list[ReplayBatch], list[Targets], ReanalysisCounts]:
        """The batches, their targets and what the reanalysis did (re-raises an error of the worker)."""
        self.wait()
        if self._error is not None:
            raise self._error
        assert self._targets is not None
        return self.batches, self._targets, self._counts


class RoundTargets:
    """A training round's batches and targets: computed in the update, or, with ``prefetch``, sampled at the end
    of the previous round and computed while it trained (in a thread, or with ``"process"`` in a
    :class:`ReanalysisWorker`, whose target network is sent again after :meth:`refreshed`)."""

    def __init__(self) -> None:
        self.worker: ReanalysisWorker | None = None
        self._prefetched: ThreadPrefetch | ProcessPrefetch | None = None
        self._stale = True

    def next(
        self,
        reanalysis: Reanalysis,
        sample: Callable[[], ReplayBatch],
        gradient_steps: int,
        batch_size: int,
        rng: np.random.Generator,
        prefetch: bool | str = False,
    ) -> tuple[list[ReplayBatch], list[Targets], ReanalysisCounts]:
        """This round's batches (drawn by ``sample``), targets and what the reanalysis did; with ``prefetch``
        (``True``: in a thread, ``"process"``: in the worker) the next round's are started."""
        prefetched, self._prefetched = self._prefetched, None
        if (
            prefetched is not None
            and len(prefetched.batches) == gradient_steps
            and len(prefetched.batches[0].slots) == batch_size
        ):
            batches, targets, counts = prefetched.result()
        else:
            if prefetched is not None:
                prefetched.wait()
            batches, counts = [sample() for _ in range(gradient_steps)], ReanalysisCounts()
            targets = reanalysis.targets(batches, rng, counts)
        if prefetch:
            self._prefetched = self._start([sample() for _ in range(gradient_steps)], reanalysis, rng, prefetch)
        return batches, targets, counts

    def _start(
        self, batches: list[ReplayBatch], reanalysis: Reanalysis, rng: np.random.Generator, prefetch: bool | str
    ) -> ThreadPrefetch | ProcessPrefetch:
        if prefetch != "process":
            return ThreadPrefetch(batches, lambda round_batches, counts: reanalysis.targets(round_batches, rng, counts))
        if self.worker is None:
            self.worker = ReanalysisWorker(reanalysis)
            self._stale = True
        weights = None
        if self._stale:
            weights = {name: value.numpy() for name, value in reanalysis.target_network.state_dict().items()}
            self._stale = False
        return ProcessPrefetch(batches, self.worker, rng, weights, reanalysis.device)

    @property
    def pending(self) -> ThreadPrefetch | ProcessPrefetch | None:
        """The prefetch in flight, if any."""
        return self._prefetched

    def wait(self) -> None:
        """Block until the prefetch in flight (if any) is done: before the target network changes."""
        if self._prefetched is not None:
            self._prefetched.wait()

    def refreshed(self) -> None:
        """The target network changed: the worker gets it with its next batches."""
        self._stale = True

    def drop(self) -> None:
        """Finish and forget the prefetch in flight (its batches are not trained on)."""
        self.wait()
        self._prefetched = None

