"""The delay benchmark's committed results regenerate its committed figures and table exactly.

``docs/results/delay-benchmark/`` holds each finished cell's record, configuration and evaluation CSV;
``python -m delayzoo.zoo.plot --by-delay -f docs/results/delay-benchmark -o <dir>`` must draw the same
pixels as the PNGs under ``docs/results/delay-benchmark-figures/`` (PNG metadata such as the matplotlib
version aside) and write the same table, byte for byte, which ``docs/delay-benchmark.md`` shows.
"""

from __future__ import annotations

import matplotlib.image
import numpy as np

from delayzoo.zoo import plot
from tests.docs.blocks import REPO

RESULTS = REPO / "docs" / "results" / "delay-benchmark"
FIGURES = REPO / "docs" / "results" / "delay-benchmark-figures"


def test_the_committed_results_regenerate_the_committed_table_and_figures(tmp_path):
    assert plot.main(["--by-delay", "-f", str(RESULTS), "-o", str(tmp_path)]) == 0
    committed = sorted(path.name for path in FIGURES.iterdir())
    assert sorted(path.name for path in tmp_path.iterdir()) == committed
    assert (tmp_path / "by-delay.md").read_bytes() == (FIGURES / "by-delay.md").read_bytes()
    for name in committed:
        if name.endswith(".png"):
            drawn, kept = matplotlib.image.imread(tmp_path / name), matplotlib.image.imread(FIGURES / name)
            assert drawn.shape == kept.shape and np.array_equal(drawn, kept), f"{name} differs from the committed one"


def test_the_benchmark_page_shows_the_committed_table_and_figures():
    page = (REPO / "docs" / "delay-benchmark.md").read_text()
    tables = [block.strip() for block in (FIGURES / "by-delay.md").read_text().split("\n\n") if block.startswith("|")]
    assert tables and all(table in page for table in tables)
    for png in FIGURES.glob("*.png"):
        assert f"results/delay-benchmark-figures/{png.name}" in page
