"""The pytest adapter: skip/fail policy for missing capabilities, needs markers, the fixture, the header."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The subprocess imports this checkout's pytest_tcpnet, whatever else is installed.
SUBPROCESS_ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))

PROJECT = textwrap.dedent("""
    import pytest
    from pytest_tcpnet import Link

    def test_undeclared(tcpnet):
        tcpnet.pair(link=Link(rate="10mbit"))

    @pytest.mark.tcpnet_needs("privilege")
    def test_declared(tcpnet):
        tcpnet.pair(link=Link(rate="10mbit"))

    @pytest.mark.tcpnet_needs("kernel>=99.0")
    def test_future_kernel():
        pass

    @pytest.mark.tcpnet_needs("kernel>=2.6")
    def test_any_kernel():
        pass
""")


def _run(children, tmp_path, *args, unprivileged=False, env=None, quiet=True):
    (tmp_path / "test_project.py").write_text(PROJECT)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-rsf",
        *(["-q"] if quiet else []),
        *args,
        "test_project.py",
    ]
    if unprivileged:
        # Root without CAP_NET_ADMIN/CAP_SYS_ADMIN, as a container or a CI job without privileges.
        argv = [
            shutil.which("setpriv"),
            "--bounding-set=-net_admin,-sys_admin",
            "--inh-caps=-net_admin,-sys_admin",
            "--",
            *argv,
        ]
        env = {"TCPNET_ROOTLESS": "off", **(env or {})}  # labs would otherwise build rootless (test_rootless.py)
    return children.run(argv, cwd=tmp_path, timeout=120, env=dict(SUBPROCESS_ENV, **(env or {})))


needs_setpriv = pytest.mark.skipif(
    shutil.which("setpriv") is None or os.geteuid() != 0,
    reason="needs root and util-linux's setpriv to drop capabilities",
)


@needs_setpriv
def test_without_privilege_lab_tests_skip_with_the_reason(children, tmp_path):
    out = _run(children, tmp_path, unprivileged=True)
    assert out.returncode == 0, out.stdout
    assert "1 passed, 3 skipped" in out.stdout
    assert "CAP_NET_ADMIN" in out.stdout
    assert "test_project.py:5: privilege" in out.stdout  # the test's location, not the plugin's
    assert "declare it: @pytest.mark.tcpnet_needs('privilege')" in out.stdout
    assert "kernel>=99.0" in out.stdout


@needs_setpriv
def test_strict_undeclared_fails_only_undeclared_needs(children, tmp_path):
    out = _run(children, tmp_path, "--tcpnet-strict=undeclared", unprivileged=True)
    assert out.returncode == 1, out.stdout
    assert "1 failed, 1 passed, 2 skipped" in out.stdout
    assert "FAILED test_project.py::test_undeclared" in out.stdout


@needs_setpriv
def test_strict_all_fails_every_missing_capability(children, tmp_path):
    out = _run(children, tmp_path, env={"TCPNET_STRICT": "all"}, unprivileged=True)
    assert out.returncode == 1, out.stdout
    # Declared needs fail in setup (pytest calls that an error), the undeclared one in the call.
    assert "1 failed, 1 passed, 2 errors" in out.stdout
    assert "capability missing (--tcpnet-strict=all)" in out.stdout


@pytest.mark.tcpnet_needs("privilege")
def test_with_privilege_the_lab_tests_run(children, tmp_path):
    out = _run(children, tmp_path, "--tcpnet-strict=undeclared")
    assert out.returncode == 0, out.stdout
    assert "3 passed, 1 skipped" in out.stdout


def test_needs_become_selectable_markers(children, tmp_path):
    out = _run(children, tmp_path, "-m", "needs_privilege", "--collect-only")
    assert "test_declared" in out.stdout and "test_undeclared" not in out.stdout


def test_unknown_need_is_an_error(tmp_path):
    (tmp_path / "test_bad.py").write_text(
        "import pytest\n@pytest.mark.tcpnet_needs('warp-drive')\ndef test_x():\n    pass\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_bad.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=SUBPROCESS_ENV,
    )
    assert out.returncode == 1
    assert "unknown need 'warp-drive'" in out.stdout


def test_report_header_describes_the_machine(children, tmp_path):
    out = _run(children, tmp_path, "--collect-only", quiet=False)
    assert f"tcpnet: kernel {os.uname().release}" in out.stdout
