"""The agents' reader of :class:`~delayzoo.wrappers.PendingActionsObservation`'s ``Dict`` and the
batched roll of a model through each env's own pending actions.

The delay rule lives in :mod:`delayzoo.wrappers.delay`; the agents only read what the wrapper
documents: ``"pending_actions"`` holds ``e_t .. e_{t+d-1}`` (padded to ``max_delay``) and ``"delay"``
holds ``d``, so entry 0 is the action the env executes next whenever ``d > 0``. Over an
:class:`~delayzoo.wrappers.ObservationDelay` the view also has ``"obs_delay"`` (``o``), and
``"pending_actions"`` holds the ``o`` actions executed since the shown observation's step before those ``d``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar, cast

import torch
from gymnasium import spaces

__all__ = ["PendingView", "has_pending_view", "read_pending_view", "roll_through_pending"]

PENDING_VIEW_KEYS = ("observation", "pending_actions", "delay")
"""The keys of the pending view's ``Dict`` observation."""
"""The keys of :class:`~delayzoo.wrappers.PendingActionsObservation`'s ``Dict``."""


class PendingView(NamedTuple):
    """A batch of pending views: ``observation`` (the one the env shows), ``actions``
    ``(B, max_obs_delay + max_delay, *action_shape)`` (entries at positions ``>= obs_delays[b] + delays[b]``
    are padding, set to 0), ``delays`` ``(B,)`` and ``obs_delays`` ``(B,)`` (long; zeros when the view has
    no ``"obs_delay"``): the first ``obs_delays[b]`` actions have been executed since the observation's step."""

    observation: torch.Tensor
    actions: torch.Tensor
    delays: torch.Tensor
    obs_delays: torch.Tensor


def has_pending_view(observation_space: spaces.Space) -> bool:
    """Whether ``observation_space`` is a ``Dict`` with the pending-view keys."""
    if not isinstance(observation_space, spaces.Dict):
        return False
    return all(key in observation_space.spaces for key in PENDING_VIEW_KEYS)


def read_pending_view(obs: dict[str, torch.Tensor], action_space: spaces.Space) -> PendingView:
    """The pending view of a batch of ``Dict`` observations, checked against ``action_space``.

    :param obs: batched tensors under the keys of ``PENDING_VIEW_KEYS``, and ``"obs_delay"`` when the view has it
    :param action_space: ``Discrete`` (pending entries are indices ``action - start``) or ``Box``
    :return: the view, its padding (positions ``>= obs_delay + delay``) set to 0 whatever it held
    :raise ValueError: for delays outside the pending actions or a pending action (before its env's
        ``obs_delay + delay``) outside the action space, naming the env, the position and the value
    """
    delays = obs["delay"].reshape(-1).long()
    obs_delays = obs["obs_delay"].reshape(-1).long() if "obs_delay" in obs else torch.zeros_like(delays)
    batch = delays.shape[0]
    if isinstance(action_space, spaces.Discrete):
        actions = obs["pending_actions"].reshape(batch, -1).long()
    elif isinstance(action_space, spaces.Box):
        actions = obs["pending_actions"].reshape(batch, -1, *action_space.shape)
    else:
        raise TypeError(f"pending actions of Discrete or Box action spaces only, got {action_space}")
    size = actions.shape[1]
    unseen = obs_delays + delays
    bad = (delays < 0) | (obs_delays < 0) | (unseen > size)
    if bad.any():
        env = int(torch.nonzero(bad)[0])
        named = f"delay {int(delays[env])}"
        if "obs_delay" in obs:
            named = f"obs_delay {int(obs_delays[env])} + {named}"
        raise ValueError(f"{named} of env {env} is outside [0, {size}] (the pending actions it has)")
    due = torch.arange(size, device=delays.device) < unseen.unsqueeze(1)
    if isinstance(action_space, spaces.Discrete):
        outside = (actions < 0) | (actions >= int(action_space.n))
    else:
        low = torch.as_tensor(action_space.low, device=actions.device, dtype=actions.dtype)
        high = torch.as_tensor(action_space.high, device=actions.device, dtype=actions.dtype)
        outside = ((actions < low) | (actions > high) | ~torch.isfinite(actions)).flatten(2).any(-1)
    outside = outside & due
    if outside.any():
        env, position = (int(i) for i in torch.nonzero(outside)[0])
        shown = actions[env, position].tolist()
        raise ValueError(
            f"pending action {shown} of env {env} (position {position}, delay {int(delays[env])}) "
            f"is outside the action space {action_space}"
        )
    padding = ~due.view(*due.shape, *([1] * (actions.ndim - 2)))
    return PendingView(obs["observation"], actions.masked_fill(padding, 0), delays, obs_delays)


Carry = TypeVar("Carry", torch.Tensor, dict[str, torch.Tensor])


def roll_through_pending(
    step: Callable[[Carry, torch.Tensor], Carry], carry: Carry, actions: torch.Tensor, delays: torch.Tensor
) -> Carry:
    """Roll each row of ``carry`` through its own pending actions.

    Row ``b`` becomes ``step(...step(carry[b], actions[b, 0])..., actions[b, delays[b] - 1])``; rows
    with different delays share each call: at roll step ``k`` only the rows with ``delays > k`` are
    stepped, so a row with delay 0 is returned unchanged and ``step`` is never called when all are 0.

    :param step: ``(carry rows, actions (n, ...)) -> next carry rows``
    :param carry: a ``(B, ...)`` tensor or a dict of them
    :param actions: ``(B, max_delay, ...)``; entries at positions ``>= delays[b]`` are ignored
    :param delays: ``(B,)`` integer delays
    """
    delays = delays.long().to(actions.device)
    if delays.dim() != 1 or delays.shape[0] != actions.shape[0]:
        raise ValueError(f"delays must have shape ({actions.shape[0]},), got {tuple(delays.shape)}")
    if (delays < 0).any() or (delays.numel() and delays.max() > actions.shape[1]):
        raise ValueError(f"delays {delays.tolist()} outside [0, {actions.shape[1]}]")
    is_dict = isinstance(carry, dict)
    out = {name: value.clone() for name, value in carry.items()} if is_dict else carry.clone()
    for k in range(int(delays.max()) if delays.numel() else 0):
        rows = torch.nonzero(delays > k).flatten()
        if is_dict:
            stepped = step({name: value[rows] for name, value in out.items()}, actions[rows, k])
            for name, value in stepped.items():
                out[name][rows] = value
        else:
            out[rows] = step(out[rows], actions[rows, k])
    return cast(Carry, out)
