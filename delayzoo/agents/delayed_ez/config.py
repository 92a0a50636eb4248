"""The two configuration objects of DelayedEZ: how to search, and how to build training targets.

:class:`~delayzoo.agents.delayed_ez.delayed_ez.DelayedEZ` builds them from its constructor keywords
and hands them on unchanged: :class:`SearchConfig` to the policy and its
:class:`~delayzoo.agents.delayed_ez.mcts.MCTS`, :class:`TargetConfig` to the replay's target builder
and the reanalysis. Each hyperparameter is declared and checked here, once.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

from delayzoo.ctree import Q_NORMALIZATIONS

__all__ = ["GUMBEL_FIELDS", "Q_NORMALIZATIONS", "SEARCH_METHODS", "SearchConfig", "TargetConfig"]

SEARCH_METHODS = ("puct", "gumbel")
GUMBEL_FIELDS = ("method", "num_considered_actions", "gumbel_scale", "c_visit", "c_scale", "q_normalization")
"""The fields of :class:`SearchConfig` that DelayedEZ takes in ``search_kwargs`` (the others are its flat keywords)."""


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _check_real(name: str, value: Any, low: float, high: float, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not (low < value if low_open else low <= value) or not value <= high:
        raise ValueError(f"{name} must be in {'(' if low_open else '['}{low}, {high}], got {value}")


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

    def __post_init__(self) -> None:
        _check_int("num_simulations", self.num_simulations, 1)
        _check_int("lstm_horizon", self.lstm_horizon, 1)
        _check_real("discount", self.discount, 0.0, 1.0, low_open=True)
        _check_real("pb_c_base", self.pb_c_base, 0.0, float("inf"), low_open=True)
        _check_real("pb_c_init", self.pb_c_init, 0.0, float("inf"))
        _check_real("dirichlet_alpha", self.dirichlet_alpha, 0.0, float("inf"), low_open=True)
        _check_real("exploration_fraction", self.exploration_fraction, 0.0, 1.0)
        _check_choice("method", self.method, SEARCH_METHODS)
        _check_int("num_considered_actions", self.num_considered_actions, 1)
        _check_real("gumbel_scale", self.gumbel_scale, 0.0, float("inf"))
        _check_real("c_visit", self.c_visit, 0.0, float("inf"))
        _check_real("c_scale", self.c_scale, 0.0, float("inf"))
        _check_choice("q_normalization", self.q_normalization, Q_NORMALIZATIONS)

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
        _check_int("num_unroll_steps", self.num_unroll_steps, 1)
        _check_int("td_steps", self.td_steps, 1)
        _check_int("lstm_horizon", self.lstm_horizon, 1)
        _check_real("discount", self.discount, 0.0, 1.0, low_open=True)
        _check_real("reanalyze_ratio", self.reanalyze_ratio, 0.0, 1.0)
        if self.auto_td_period is not None:
            _check_int("auto_td_period", self.auto_td_period, 1)
        _check_bool("use_root_value", self.use_root_value)
