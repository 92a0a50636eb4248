"""The compiled tree is built and used; without it the package falls back to ptree; no memory leaks."""

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import delayzoo.ctree
from delayzoo.ctree import _ctree

REPO = Path(__file__).resolve().parents[2]


def test_compiled_tree_is_the_default():
    assert delayzoo.ctree.HAS_CTREE
    for name in ("Roots", "MinMaxStatsList", "SearchResults", "batch_traverse", "batch_backpropagate"):
        assert getattr(delayzoo.ctree, name) is getattr(_ctree, name)


def test_import_falls_back_to_ptree_with_a_warning_when_the_extension_is_missing():
    code = (
        "import sys, warnings\n"
        "sys.modules['delayzoo.ctree._ctree'] = None  # makes the import fail like a missing build\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    import delayzoo.ctree as ct\n"
        "from delayzoo.ctree import ptree\n"
        "assert not ct.HAS_CTREE\n"
        "assert ct.Roots is ptree.Roots and ct.batch_traverse is ptree.batch_traverse\n"
        "messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]\n"
        "assert any('not built' in m for m in messages), messages\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _rss_bytes() -> int:
    statm = Path("/proc/self/statm")
    if statm.exists():
        return int(statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def test_ten_thousand_searches_do_not_grow_memory():
    batch, actions, simulations = 4, 5, 8
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(batch, actions))
    outputs = [(rng.normal(size=batch), rng.normal(size=batch), rng.normal(size=(batch, actions))) for _ in range(8)]
    bad_value = np.full(batch, np.nan)

    def searches(count):
        for i in range(count):
            roots = _ctree.Roots(batch, actions, simulations + 1, seed=i)
            roots.prepare(np.zeros(batch), logits)
            minmax, results = _ctree.MinMaxStatsList(batch), _ctree.SearchResults(batch)
            for s, (vp, value, pl) in enumerate(outputs, start=1):
                _ctree.batch_traverse(roots, 1.25, 19652, 0.99, minmax, results)
                if i % 10 == 0 and s == 1:  # the error path must not leak either
                    with pytest.raises(ValueError):
                        _ctree.batch_backpropagate(s, 0.99, vp, bad_value, pl, minmax, results)
                _ctree.batch_backpropagate(s, 0.99, vp, value, pl, minmax, results, results.search_lengths() > 1)
            roots.distributions()
            roots.values()

    searches(1_000)  # warm-up: allocator pools, numpy caches
    before = _rss_bytes()
    searches(10_000)
    grown = _rss_bytes() - before
    one_search_pools = batch * (simulations + 1) * (actions * 32 + 24)
    assert grown < 1_000_000, f"RSS grew by {grown} bytes over 10,000 searches ({one_search_pools} bytes of pools each)"
