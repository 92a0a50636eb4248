"""Batched MCTS tree for EfficientZero-style search (DelayedEZ).

``Roots``, ``MinMaxStatsList``, ``SearchResults``, ``batch_traverse`` (pUCT), ``batch_traverse_gumbel``,
``gumbel_outputs``, ``halving_schedule`` and ``batch_backpropagate`` come from the compiled extension
:mod:`delayzoo.ctree._ctree` when it is built (``pip install .``), otherwise from its pure-Python twin
:mod:`delayzoo.ctree.ptree`, with a ``RuntimeWarning``. ``HAS_CTREE`` says which one is in use. The semantics
are documented in :mod:`delayzoo.ctree.ptree`.
"""

import warnings

try:
    from delayzoo.ctree._ctree import (
        Q_NORMALIZATIONS,
        MinMaxStatsList,
        Roots,
        SearchResults,
        batch_backpropagate,
        batch_traverse,
        batch_traverse_gumbel,
        gumbel_outputs,
        halving_schedule,
    )

    HAS_CTREE = True
except ImportError:
    warnings.warn(
        "delayzoo.ctree: the compiled tree is not built, falling back to the much slower "
        "pure-Python delayzoo.ctree.ptree; build it with `pip install .` (or `pip install -e .`)",
        RuntimeWarning,
        stacklevel=2,
    )
    from delayzoo.ctree.ptree import (  # type: ignore[assignment]
        Q_NORMALIZATIONS,
        MinMaxStatsList,
        Roots,
        SearchResults,
        batch_backpropagate,
        batch_traverse,
        batch_traverse_gumbel,
        gumbel_outputs,
        halving_schedule,
    )

    HAS_CTREE = False

__all__ = [
    "HAS_CTREE",
    "MinMaxStatsList",
    "Q_NORMALIZATIONS",
    "Roots",
    "SearchResults",
    "batch_backpropagate",
    "batch_traverse",
    "batch_traverse_gumbel",
    "gumbel_outputs",
    "halving_schedule",
]
