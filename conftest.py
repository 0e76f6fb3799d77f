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


@pytest.fixture(autouse=True)
def _numpy_outlives_pytester(request):
    """An in-process pytester session puts sys.modules back as it found it: numpy first imported inside it (a failing
    inner test draws its plots) is dropped, and numpy will not load twice in one process ("cannot load module more
    than once per process"), so a later test of the same worker that plots failed. Imported first, it is kept."""
    if "pytester" in request.fixturenames:
        try:
            import numpy  # noqa: F401
        except ImportError:  # no plots extra: nothing to keep
            pass
