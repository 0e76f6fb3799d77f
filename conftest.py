"""Repository-wide pytest configuration: lets tests import their helpers (tests/hoststate.py)."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "tests"))
