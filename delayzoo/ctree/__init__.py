"""Batched MCTS tree for EfficientZero-style search (DelayedEZ).

``Roots``, ``MinMaxStatsList``, ``SearchResults``, ``batch_traverse`` and ``batch_backpropagate``
come from the compiled extension :mod:`delayzoo.ctree._ctree` when it is built (``pip install .``),
otherwise from its pure-Python twin :mod:`delayzoo.ctree.ptree`, with a ``RuntimeWarning``.
``HAS_CTREE`` says which one is in use. The semantics are documented in :mod:`delayzoo.ctree.ptree`.
"""

import warnings

try:
    from delayzoo.ctree._ctree import (
        MinMaxStatsList,
        Roots,
        SearchResults,
        batch_backpropagate,
        batch_traverse,
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
        MinMaxStatsList,
        Roots,
        SearchResults,
        batch_backpropagate,
        batch_traverse,
    )

    HAS_CTREE = False

__all__ = ["HAS_CTREE", "MinMaxStatsList", "Roots", "SearchResults", "batch_backpropagate", "batch_traverse"]
