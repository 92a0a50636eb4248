"""The Ray connect helper: addresses it refuses before any Ray starts, and the extra it names without Ray."""

import re
import sys

import pytest

from delayzoo.agents.common.ray_connect import INSTALL_RAY, UnreachableClusterError, connect, import_ray


@pytest.mark.parametrize("address", ["localhost", "host:port", ":6379", "ray://nohost"])
def test_a_malformed_address_is_a_value_error(address):
    with pytest.raises(ValueError, match="'auto', HOST:PORT or ray://HOST:PORT"):
        connect(address)


def test_an_unreachable_cluster_is_named():
    with pytest.raises(UnreachableClusterError, match="cannot reach the Ray cluster at ray://127.0.0.1:9"):
        connect("ray://127.0.0.1:9")


def test_without_ray_the_import_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=re.escape(f"sweeps run on Ray, which is not installed: {INSTALL_RAY}")):
        import_ray("sweeps run")
    assert INSTALL_RAY == 'pip install "delayzoo[ray]"'
