"""Every need a marker can name works under --strict-markers; --markers and --fixtures document them."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from pytest_tcpnet.model import KNOWN_CONGESTION_CONTROLS
from pytest_tcpnet.requirements import QDISC_NEEDS, TOOL_NEEDS

REPO = Path(__file__).resolve().parent.parent
ALL_NAMED_NEEDS = sorted({"privilege", "root", *QDISC_NEEDS, *KNOWN_CONGESTION_CONTROLS, *TOOL_NEEDS})


def pytest_in(project, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_every_named_need_collects_under_strict_markers(tmp_path):
    tests = "".join(
        f"@pytest.mark.tcpnet_needs({need!r})\ndef test_{need.replace('-', '_')}():\n    pass\n\n"
        for need in ALL_NAMED_NEEDS
    )
    (tmp_path / "test_needs.py").write_text(
        "import pytest\n\n" + tests + "@pytest.mark.tcpnet_needs('kernel>=6.6', 'htb')\n"
        "def test_kernel_and_htb():\n    pass\n"
    )
    out = pytest_in(tmp_path, "--strict-markers", "--collect-only", "-q")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(ALL_NAMED_NEEDS) + 1} tests collected" in out.stdout
    # Each need's marker selects exactly the tests that declared it.
    selected = pytest_in(tmp_path, "--strict-markers", "--collect-only", "-q", "-m", "needs_htb")
    assert selected.stdout.splitlines()[:2] == ["test_needs.py::test_htb", "test_needs.py::test_kernel_and_htb"]
    for need in ("cubic", "nsenter", "clsact", "privilege"):
        one = pytest_in(tmp_path, "--strict-markers", "--collect-only", "-q", "-m", f"needs_{need}")
        assert one.stdout.splitlines()[0] == f"test_needs.py::test_{need}", one.stdout


def test_unknown_need_is_a_clear_error_not_an_internal_error(tmp_path):
    (tmp_path / "test_bad.py").write_text(
        textwrap.dedent("""
        import pytest

        @pytest.mark.tcpnet_needs("warpdrive")
        def test_x():
            pass
    """)
    )
    out = pytest_in(tmp_path, "--strict-markers", "-q")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "INTERNALERROR" not in out.stdout + out.stderr
    assert "unknown need 'warpdrive'" in out.stdout


def test_markers_are_documented(tmp_path):
    out = pytest_in(tmp_path, "--markers")
    assert out.returncode == 0
    for need in ALL_NAMED_NEEDS:
        assert f"@pytest.mark.needs_{need}: added automatically from tcpnet_needs('{need}')" in out.stdout
    assert "@pytest.mark.tcpnet_needs(*needs):" in out.stdout
    assert "kernel versions are not identifiers and get no needs_ marker" in out.stdout
    assert "needs_netem: added automatically from tcpnet_needs('netem') (qdisc sch_netem)" in out.stdout


def test_fixture_is_documented(tmp_path):
    out = pytest_in(tmp_path, "--fixtures")
    assert out.returncode == 0
    section = out.stdout.split("\ntcpnet -- ", 1)[1]
    assert "tcpnet.pair(link=, client=, server=)" in section
    assert "tcpnet_needs" in section.split("\n\n")[0]
