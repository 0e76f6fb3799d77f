"""Repository-wide pytest configuration: lets tests import their helpers (tests/hoststate.py), and owns their children."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "tests"))


@pytest.fixture
def children():
    """Processes and nested sessions the test starts (children.Children): killed with their groups at teardown."""
    from children import Children

    owned = Children()
    try:
        yield owned
    finally:
        owned.close()
