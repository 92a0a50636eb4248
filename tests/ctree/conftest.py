"""Fixtures for the ctree tests."""

from types import ModuleType

import pytest
from ctree_helpers import TREES


@pytest.fixture(params=sorted(TREES))
def tree(request) -> ModuleType:
    """Each tree implementation in turn."""
    return TREES[request.param]
