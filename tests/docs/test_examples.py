"""Every Python block of the README and of the docs runs, with ``learn`` capped (see ``capped.py``).

The blocks of a page run in order in one namespace, as a reader would paste them, in a fresh folder;
blocks marked ``<!-- example: skip (reason) -->`` are compiled and their imports run.
"""

from __future__ import annotations

import ast
import contextlib
import io

import pytest
import torch

from tests.docs.blocks import PAGES, REPO, python_blocks
from tests.docs.capped import capped_learning, example_steps

PAGES_WITH_PYTHON = [page for page in PAGES if python_blocks(page)]


def _imports_only(code: str) -> ast.Module:
    tree = ast.parse(code)
    return ast.Module([node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)], [])


@pytest.mark.parametrize("page", PAGES_WITH_PYTHON, ids=lambda page: str(page.relative_to(REPO)))
def test_the_python_examples_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    namespace: dict = {"__name__": "__main__"}
    with capped_learning(example_steps()), contextlib.redirect_stdout(io.StringIO()):
        for block in python_blocks(page):
            try:
                code = compile(block.code, block.where, "exec")
                if block.skip_reason:
                    exec(compile(_imports_only(block.code), block.where, "exec"), {})
                else:
                    exec(code, namespace)
            except Exception as error:
                raise AssertionError(f"the example at {block.where} fails: {error!r}") from error
    torch.set_num_threads(threads)


def test_examples_are_found_and_skips_say_why():
    blocks = [block for page in PAGES for block in python_blocks(page)]
    assert sum(block.skip_reason is None for block in blocks) >= 10
    readme = python_blocks(REPO / "README.md")
    assert len(readme) == 2 and not any(block.skip_reason for block in readme)
    assert all(block.skip_reason.strip() for block in blocks if block.skip_reason)
