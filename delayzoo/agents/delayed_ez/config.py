"""DelayedEZ's configuration objects, one per concern: how to search, how to build training targets, how the
replay samples, and how a run is spread over Ray actors.

:class:`~delayzoo.agents.delayed_ez.delayed_ez.DelayedEZ` builds them from its constructor keywords (the keyword
groups ``search_kwargs``, ``replay_buffer_kwargs`` and ``actor_kwargs``, as SB3's ``policy_kwargs``, and a few
flat ones) and hands them on unchanged: :class:`SearchConfig` to the policy and its
:class:`~delayzoo.agents.delayed_ez.mcts.MCTS`, :class:`TargetConfig` to the replay's target builder and the
reanalysis, :class:`ReplayConfig` to the replay and the game writers, :class:`ActorConfig` to the actors. Each
hyperparameter is declared, given its default and checked here, once. :func:`regroup` maps the flat keywords
of earlier versions to their groups.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

from delayzoo.agents.common.checks import check_gradient_steps, check_learning_rate, check_train_freq
from delayzoo.checks import check_number
from delayzoo.ctree import Q_NORMALIZATIONS

__all__ = [
    "ActorConfig",
    "GROUPS",
    "Q_NORMALIZATIONS",
    "ReplayConfig",
    "SEARCH_KWARGS",
    "SEARCH_METHODS",
    "SearchConfig",
    "TargetConfig",
    "check_flat_settings",
    "check_group",
    "regroup",
    "regroup_keywords",
]

SEARCH_METHODS = ("puct", "gumbel")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SearchConfig:
    """The batched search: EfficientZero's pUCT (defaults: the paper's Atari values) or Gumbel MuZero's.

    ``method="gumbel"`` is the search of EfficientZero V2 (Danihelka et al., ICLR 2022; Wang et al., ICML 2024):
    Gumbel-top-k sampling of ``num_considered_actions`` root actions, sequential halving over the simulations,
    and the improved policy ``softmax(logits + sigma(completed Q))`` as the policy target, with
    ``sigma(q) = (c_visit + max N) * c_scale * q`` (:mod:`delayzoo.ctree.ptree` has the rules). It takes no
    Dirichlet noise and no visit temperature: the search selects the action.

    :param num_simulations: simulations per search (each expands one node per root)
    :param discount: discount of the backed-up values
    :param pb_c_base: pUCT c2
    :param pb_c_init: pUCT c1
    :param dirichlet_alpha: pUCT's root noise concentration (training only)
    :param exploration_fraction: pUCT's root noise weight (training only)
    :param lstm_horizon: the value-prefix LSTM restarts below nodes at depths that are multiples of this
    :param method: ``"puct"`` (EfficientZero's, the paper's) or ``"gumbel"``
    :param num_considered_actions: Gumbel: root actions sampled without replacement (m; capped by the action
        count)
    :param gumbel_scale: Gumbel: scale of the root noise while training and reanalysing; evaluation and
        deterministic predictions use 0
    :param c_visit: Gumbel: sigma's visit offset
    :param c_scale: Gumbel: sigma's scale
    :param q_normalization: how Q values are normalised to [0, 1], in both searches: ``"tree"`` by the min-max
        of the whole tree (EfficientZero's), ``"parent_siblings"`` at each node by the min-max of its visited
        children's Q and its own value (mctx's ``qtransform_by_parent_and_siblings``)
    :param visit_temperature: pUCT, while training: actions are sampled from ``visits^(1/T)``; ``None`` follows
        EfficientZero (T = 1, then 0.5 after half of training, 0.25 after three quarters)
    """

    num_simulations: int = 50
    discount: float = 0.997**4
    pb_c_base: float = 19652.0
    pb_c_init: float = 1.25
    dirichlet_alpha: float = 0.3
    exploration_fraction: float = 0.25
    lstm_horizon: int = 5
    method: str = "puct"
    num_considered_actions: int = 16
    gumbel_scale: float = 1.0
    c_visit: float = 50.0
    c_scale: float = 0.1
    q_normalization: str = "tree"
    visit_temperature: float | None = None

    def __post_init__(self) -> None:
        check_number("num_simulations", self.num_simulations, 1, integer=True)
        check_number("lstm_horizon", self.lstm_horizon, 1, integer=True)
        check_number("discount", self.discount, 0, 1, low_open=True)
        check_number("pb_c_base", self.pb_c_base, 0, low_open=True)
        check_number("pb_c_init", self.pb_c_init, 0)
        check_number("dirichlet_alpha", self.dirichlet_alpha, 0, low_open=True)
        check_number("exploration_fraction", self.exploration_fraction, 0, 1)
        _check_choice("method", self.method, SEARCH_METHODS)
        check_number("num_considered_actions", self.num_considered_actions, 1, integer=True)
        check_number("gumbel_scale", self.gumbel_scale, 0)
        check_number("c_visit", self.c_visit, 0)
        check_number("c_scale", self.c_scale, 0)
        _check_choice("q_normalization", self.q_normalization, Q_NORMALIZATIONS)
        if self.visit_temperature is not None:
            check_number("visit_temperature", self.visit_temperature, 0, low_open=True)

    def temperature(self, progress_remaining: float) -> float:
        """The visit-count temperature of acting at this point of training (see ``visit_temperature``)."""
        if self.visit_temperature is not None:
            return self.visit_temperature
        done = 1.0 - progress_remaining
        return 1.0 if done < 0.5 else (0.5 if done < 0.75 else 0.25)

    @property
    def gumbel(self) -> bool:
        """Whether the search is Gumbel MuZero's."""
        return self.method == "gumbel"

    @property
    def uses_root_values(self) -> bool:
        """Whether the search reads the roots' network values (Gumbel's mixed value, per-node normalisation)."""
        return self.gumbel or self.q_normalization != "tree"


@dataclasses.dataclass(frozen=True)
class TargetConfig:
    """EfficientZero's unrolled training targets (defaults: the paper's Atari values).

    :param num_unroll_steps: model unroll steps per sample (K)
    :param td_steps: n of the n-step value targets
    :param discount: discount of the value targets
    :param lstm_horizon: value-prefix targets restart every this many unroll steps
    :param reanalyze_ratio: fraction of each batch whose policy targets come from a fresh search with
        the target network
    :param auto_td_period: adaptive horizon: ``td_steps`` shrinks by one per this many transitions of
        age, never below 1 (``None``: fixed horizon)
    :param use_root_value: the value targets bootstrap from the root value of a search (target network,
        with the root noise of the policy reanalysis) at the bootstrap observation instead of the target
        network's predicted value (EfficientZero's ``--use_root_value``)
    """

    num_unroll_steps: int = 5
    td_steps: int = 5
    discount: float = 0.997**4
    lstm_horizon: int = 5
    reanalyze_ratio: float = 0.99
    auto_td_period: int | None = 30_000
    use_root_value: bool = False

    def __post_init__(self) -> None:
        check_number("num_unroll_steps", self.num_unroll_steps, 1, integer=True)
        check_number("td_steps", self.td_steps, 1, integer=True)
        check_number("lstm_horizon", self.lstm_horizon, 1, integer=True)
        check_number("discount", self.discount, 0, 1, low_open=True)
        check_number("reanalyze_ratio", self.reanalyze_ratio, 0, 1)
        if self.auto_td_period is not None:
            check_number("auto_td_period", self.auto_td_period, 1, integer=True)
        _check_bool("use_root_value", self.use_root_value)


@dataclasses.dataclass(frozen=True)
class ReplayConfig:
    """The prioritised replay of game segments (defaults: EfficientZero's).

    :param priority_alpha: priority exponent (0: uniform sampling)
    :param priority_beta: initial importance-sampling exponent, annealed to 1 over training
    :param segment_length: episodes are stored as segments of at most this many transitions
    """

    priority_alpha: float = 0.6
    priority_beta: float = 0.4
    segment_length: int = 200

    def __post_init__(self) -> None:
        check_number("priority_alpha", self.priority_alpha, 0)
        check_number("priority_beta", self.priority_beta, 0, 1)
        check_number("segment_length", self.segment_length, 1, integer=True)

    def beta(self, progress_remaining: float) -> float:
        """The importance-sampling exponent at this point of training (``priority_beta`` annealed to 1)."""
        return self.priority_beta + (1.0 - self.priority_beta) * (1.0 - progress_remaining)


def _check_resources(name: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict) or set(value) - {"num_cpus", "num_gpus"}:
        raise ValueError(f"{name} must be None or a dict with num_cpus and/or num_gpus, got {value!r}")
    for key, amount in value.items():
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or amount < 0:
            raise ValueError(f"{name}[{key!r}] must be a number >= 0, got {amount!r}")


@dataclasses.dataclass(frozen=True)
class ActorConfig:
    """How a DelayedEZ run spreads its work: over Ray actors (:mod:`~delayzoo.agents.delayed_ez.distributed` runs
    them), and in searches of how many roots (run settings, not saved with the model).

    :param self_play_actors: self-play actors (0: acting in the learner's process, SB3's loop)
    :param reanalysis_actors: reanalysis actors (0: targets in the learner's process, or its ``prefetch``)
    :param ray_address: ``None`` (local Ray, or the one this process is connected to), ``"auto"``,
        ``HOST:PORT`` or ``ray://HOST:PORT``
    :param envs_per_actor: envs of each self-play actor (the reference's ``p_mcts_num``)
    :param self_play_update_interval: updates between weight copies to the self-play actors (reference: 100)
    :param self_play_resources: Ray resources of a self-play actor (``num_cpus``, ``num_gpus``); ``None``: a
        quarter of a CPU, so actors find room beside sweep cells
    :param reanalysis_resources: the same for a reanalysis actor; ``None``: a quarter of a CPU, plus 0.05 GPU
        where the cluster has GPUs
    :param actor_max_restarts: restarts of an actor and retries of a call before its error stops ``learn``
    :param placement_timeout: seconds to wait for the actors to be placed and built
    :param reanalysis_chunk: roots per reanalysis search (of the learner, its worker or an actor); ``None``: all at
        once on a GPU, 1024 on a CPU
    """

    self_play_actors: int = 0
    reanalysis_actors: int = 0
    ray_address: str | None = None
    envs_per_actor: int = 1
    self_play_update_interval: int = 100
    self_play_resources: dict[str, float] | None = None
    reanalysis_resources: dict[str, float] | None = None
    actor_max_restarts: int = 3
    placement_timeout: float = 120.0
    reanalysis_chunk: int | None = None

    def __post_init__(self) -> None:
        check_number("self_play_actors", self.self_play_actors, 0, integer=True)
        check_number("reanalysis_actors", self.reanalysis_actors, 0, integer=True)
        check_number("envs_per_actor", self.envs_per_actor, 1, integer=True)
        check_number("self_play_update_interval", self.self_play_update_interval, 1, integer=True)
        check_number("actor_max_restarts", self.actor_max_restarts, 0, integer=True)
        _check_resources("self_play_resources", self.self_play_resources)
        _check_resources("reanalysis_resources", self.reanalysis_resources)
        check_number("placement_timeout", self.placement_timeout, 0, low_open=True)
        check_number("reanalysis_chunk", self.reanalysis_chunk, 1, integer=True, optional=True)
        if self.ray_address is not None and not isinstance(self.ray_address, str):
            raise TypeError(f"ray_address must be None or a string, got {self.ray_address!r}")

    @property
    def active(self) -> bool:
        """Whether any actor is asked for."""
        return self.self_play_actors > 0 or self.reanalysis_actors > 0

    def check_ray(self) -> None:
        """An ``ImportError`` naming the extra ``delayzoo[ray]`` when actors are asked for and Ray is missing."""
        if self.active:
            from delayzoo.agents.common.ray_connect import import_ray

            import_ray("DelayedEZ's actors run")


_SEARCH_FLAT = ("num_simulations", "discount", "lstm_horizon")
"""The fields of :class:`SearchConfig` that stay flat keywords of DelayedEZ (``discount`` is its ``gamma``)."""

SEARCH_KWARGS = tuple(field.name for field in dataclasses.fields(SearchConfig) if field.name not in _SEARCH_FLAT)
"""What ``search_kwargs`` takes: every other field of :class:`SearchConfig`."""

GROUPS: dict[str, type] = {
    "search_kwargs": SearchConfig,
    "replay_buffer_kwargs": ReplayConfig,
    "actor_kwargs": ActorConfig,
}
"""DelayedEZ's keyword groups and the config each fills."""

_GROUP_KEYS = {
    "search_kwargs": SEARCH_KWARGS,
    "replay_buffer_kwargs": tuple(field.name for field in dataclasses.fields(ReplayConfig)),
    "actor_kwargs": tuple(field.name for field in dataclasses.fields(ActorConfig)),
}


def check_group(group: str, values: Any) -> dict[str, Any]:
    """A keyword group (``search_kwargs``, ...) as a new dict, its keys checked (its values are checked by the
    config it fills)."""
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise TypeError(f"{group} must be a dict or None, got {values!r}")
    allowed = _GROUP_KEYS[group]
    for key in values:
        if key not in allowed:
            flat = {"discount": "gamma", "gamma": "gamma"}.get(key, key)
            hint = f" (pass it as DelayedEZ({flat}=...))" if key in _SEARCH_FLAT + ("gamma",) else ""
            raise ValueError(f"{group} has an unknown key {key!r}{hint}; its keys are {allowed}")
    return dict(values)


FORMER_KEYWORDS = {key: group for group, keys in _GROUP_KEYS.items() for key in keys if group != "search_kwargs"}
FORMER_KEYWORDS.update(
    {key: "search_kwargs" for key in ("pb_c_base", "pb_c_init", "dirichlet_alpha", "exploration_fraction",
                                       "visit_temperature")}
)
"""Flat keywords of earlier versions of DelayedEZ -> the keyword group that holds them now."""


def regroup(settings: Mapping[str, Any], where: str) -> dict[str, Any]:
    """``settings`` (constructor keywords) with each flat keyword of an earlier version moved into its group,
    with a ``FutureWarning`` naming the new home; a key given both ways is a ``ValueError``.

    :param where: what the settings come from, for the warning (``"DelayedEZ()"``, a model file, ...)
    """
    moved = {key: group for key, group in FORMER_KEYWORDS.items() if key in settings}
    if not moved:
        return dict(settings)
    result = {key: value for key, value in settings.items() if key not in moved}
    for key, group in moved.items():
        if not isinstance(result.get(group) or {}, Mapping):
            raise ValueError(f"{where} gives {key} flat and {group} as {result[group]!r}: write {key} into {group}")
        values = dict(result.get(group) or {})
        if key in values:
            raise ValueError(f"{key} is given twice in {where}: as a keyword and in {group}")
        values[key] = settings[key]
        result[group] = values
    names = ", ".join(f"{key} -> {group}[{key!r}]" for key, group in moved.items())
    warnings.warn(
        f"DelayedEZ's keywords {names} moved into keyword groups; {where} gives them flat, which a later "
        "version will refuse: pass them in their group (e.g. search_kwargs=dict(pb_c_init=1.25))",
        FutureWarning,
        stacklevel=3,
    )
    return result


def regroup_keywords(former: Mapping[str, Any], given: Mapping[str, Any]) -> tuple[Any, ...]:
    """DelayedEZ's ``search_kwargs``, ``replay_buffer_kwargs`` and ``actor_kwargs`` (from ``given``, its call's
    keywords) with the flat keywords of an earlier version (``former``) moved in (:func:`regroup`); any other
    keyword is the ``TypeError`` of an unexpected keyword argument."""
    settings = regroup({**former, **{group: given[group] for group in GROUPS}}, "DelayedEZ()")
    values = tuple(settings.pop(name) for name in GROUPS)
    if settings:
        raise TypeError(f"DelayedEZ() got unexpected keyword arguments {sorted(settings)}")
    return values


def check_flat_settings(values: dict[str, Any]) -> None:
    """Range checks of the constructor's flat numeric arguments (``values``: its ``locals()``), before anything
    is built; the keyword groups are checked by their configs (:mod:`~delayzoo.agents.delayed_ez.config`)."""
    check_learning_rate(values["learning_rate"])
    for name, low in (
        ("buffer_size", 1), ("learning_starts", 0), ("batch_size", 1), ("num_simulations", 1),
        ("num_unroll_steps", 1), ("td_steps", 1), ("target_update_interval", 1), ("lstm_horizon", 1),
        ("lr_warmup_steps", 0), ("final_updates", 0), ("stats_window_size", 1),
    ):
        check_number(name, values[name], low, integer=True)
    check_train_freq(values["train_freq"])
    check_gradient_steps(values["gradient_steps"])
    for name in ("auto_td_period", "lr_decay_steps"):
        check_number(name, values[name], 1, integer=True, optional=True)
    for name in ("reanalyze_ratio", "gamma", "lr_decay_rate"):
        check_number(name, values[name], 0, 1)
    check_number("max_grad_norm", values["max_grad_norm"], 0, low_open=True)
    for name in ("value_loss_coef", "reward_loss_coef", "policy_loss_coef", "consistency_loss_coef"):
        check_number(name, values[name], 0)
    check_number("frame_stack", values["frame_stack"], 1, integer=True, optional=True)
    _check_bool("consistency_filter", values["consistency_filter"])
    prefetch = values["prefetch"]
    if not isinstance(prefetch, (bool, np.bool_)) and prefetch != "process":
        raise ValueError(f"prefetch must be True, False or 'process', got {prefetch!r}")
