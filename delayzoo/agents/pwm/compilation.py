"""PWM's actor-critic update passes, plain or compiled with ``torch.compile`` (``compile_update=True``).

The small models' update spends most of its time in imagination and the actor-critic loss: per
imagined step about 60 small ops over a few hundred start states, where element-wise kernels (layer
norms, mish, softmaxes, samples) cost as much as the matrix products. Compiled, each imagination
rollout is one generated graph that fuses the element-wise work between the matrix products (the
matrix memory's step stays one opaque operator, ``delayzoo::pwm_memory_step`` of
:mod:`~delayzoo.agents.pwm.sequence`), and the actor-critic loss terms another, forward and backward.
Random draws go through torch's own generator (inductor's ``fallback_random``), so a compiled update
draws the same samples as the plain one and both compute the same losses and gradients up to float
rounding.

Compiling costs tens of seconds on the first update (:attr:`UpdatePasses.compile_seconds`, logged by
:class:`~delayzoo.agents.pwm.pwm.PWM`), paid once per process and per input shape. Where compilation
is not available (no C++ compiler for inductor, a Python that Dynamo does not support) the passes warn
once and run plain.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

import torch

from delayzoo.agents.pwm.actor_critic import ActorCritic, Imagination
from delayzoo.agents.pwm.world_model import RecurrentState, WorldModel

COMPILE_KWARGS: dict[str, Any] = {"backend": "inductor", "dynamic": False, "options": {"fallback_random": True}}
"""``torch.compile`` keywords of the passes: inductor, static shapes (one batch size per run), random draws
from torch's generator as in the plain passes."""


class _CompiledOrPlain:
    """``function`` compiled on its first call, or plain (with a warning) where compiling fails."""

    def __init__(self, function: Callable[..., Any], name: str) -> None:
        self.plain, self.name = function, name
        self.seconds = 0.0
        self.compiled: Callable[..., Any] | None = None
        self._first = True
        try:
            self.compiled = torch.compile(function, **COMPILE_KWARGS)
        except Exception as error:  # e.g. a Python version Dynamo does not support
            self._fall_back(error)

    def _fall_back(self, error: Exception) -> None:
        self.compiled = None
        warnings.warn(
            f"PWM compile_update: torch.compile is not available here ({type(error).__name__}: "
            f"{str(error).strip().splitlines()[0] if str(error).strip() else 'no message'}); {self.name} runs "
            "uncompiled (same results, slower)",
            RuntimeWarning,
            stacklevel=4,
        )

    def __call__(self, *args: Any) -> Any:
        if self.compiled is None:
            return self.plain(*args)
        if not self._first:
            return self.compiled(*args)
        began = time.perf_counter()
        try:
            result = self.compiled(*args)
        except Exception as error:  # compilation fails before the graph runs: the inputs are untouched
            self._fall_back(error)
            return self.plain(*args)
        self._first = False
        self.seconds = time.perf_counter() - began
        return result


class UpdatePasses:
    """Imagination and the actor-critic loss terms of :class:`~delayzoo.agents.pwm.actor_critic.ActorCritic`,
    compiled or plain.

    :param actor_critic: the module whose passes these are.
    :param compile_update: compile them with ``torch.compile`` (see the module docstring).
    """

    def __init__(self, actor_critic: ActorCritic, compile_update: bool) -> None:
        self.compile_update = compile_update
        self._imagine: Callable[..., Imagination] = actor_critic.imagine
        self._loss_terms: Callable[..., Any] = actor_critic.loss_terms
        if compile_update:
            self._imagine = _CompiledOrPlain(actor_critic.imagine, "imagination")
            self._loss_terms = _CompiledOrPlain(actor_critic.loss_terms, "the actor-critic loss")

    def imagine(
        self, world_model: WorldModel, latent: torch.Tensor, state: RecurrentState, horizon: int
    ) -> Imagination:
        """:meth:`ActorCritic.imagine <delayzoo.agents.pwm.actor_critic.ActorCritic.imagine>`."""
        return self._imagine(world_model, latent, state, horizon)

    def imagination_loss(
        self, rollout: Imagination, gamma: float, method: str = "auto"
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        """:meth:`ActorCritic.imagination_loss <delayzoo.agents.pwm.actor_critic.ActorCritic.imagination_loss>`."""
        actor_loss, critic_loss, statistics = self._loss_terms(rollout, gamma, method)
        return actor_loss, critic_loss, {name: float(value) for name, value in statistics.items()}

    @property
    def compile_seconds(self) -> float:
        """Wall seconds the first compiled calls took (compilation and one run; 0 when plain)."""
        return sum(part.seconds for part in (self._imagine, self._loss_terms) if isinstance(part, _CompiledOrPlain))

    @property
    def compiled(self) -> bool:
        """Whether both passes run compiled (false when plain or after a fallback)."""
        return all(
            isinstance(part, _CompiledOrPlain) and part.compiled is not None
            for part in (self._imagine, self._loss_terms)
        )
