"""The pages keep up with the code: every flag of the zoo's commands is documented, and links resolve."""

from __future__ import annotations

import re

import pytest

from tests.docs.blocks import REPO

ZOO_PAGES = (REPO / "docs/zoo.md", REPO / "docs/sweeps.md", REPO / "docs/delay-benchmark.md")


def _parsers():
    from delayzoo.zoo import enjoy, plot, study, sweep, train
    from delayzoo.zoo import eval as evaluate

    return {
        "train": train.zoo_parser(),
        "eval": evaluate.parser(),
        "plot": plot.parser(),
        "enjoy": enjoy.parser(),
        "record_video": enjoy.parser(record=True),
        "sweep": sweep.parser(),
        "study": study.parser(),
    }


@pytest.mark.parametrize("command", ["train", "eval", "plot", "enjoy", "record_video", "sweep", "study"])
def test_every_flag_of_the_zoo_is_documented(command):
    text = "\n".join(page.read_text() for page in ZOO_PAGES)
    flags = {
        max(action.option_strings, key=len)
        for action in _parsers()[command]._actions
        if action.option_strings and "-h" not in action.option_strings
    }
    missing = sorted(flag for flag in flags if not re.search(rf"`{re.escape(flag)}[` =\]]", text))
    assert not missing, f"flags of {command} not documented on {[page.name for page in ZOO_PAGES]}: {missing}"


def test_the_readme_links_point_at_files_that_exist():
    readme = (REPO / "README.md").read_text()
    targets = [target for target in re.findall(r"\]\(([^)#\s]+)", readme) if "://" not in target]
    assert targets and all((REPO / target).exists() for target in targets), targets
    assert len(readme.splitlines()) <= 150
