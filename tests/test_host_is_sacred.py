"""After sessions that pass, fail or are interrupted, nothing of the plugin remains and the host is unchanged."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import hoststate
import pytest

from pytest_tcpnet import netlink

pytestmark = pytest.mark.tcpnet_needs("privilege")

PROJECT = textwrap.dedent("""
    import os, time
    from pytest_tcpnet import Host, Link

    MARK = os.environ["TCPNET_TEST_MARK"]

    def _record(pair, sleeper):
        with open(MARK, "a") as f:
            f.write(" ".join([str(sleeper.pid)] + [n.namespace for n in pair.nodes]) + "\\n")

    def test_passes(tcpnet):
        pair = tcpnet.pair(link=Link(rate="20mbit"), client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 8192 16384"}))
        _record(pair, pair.server.popen(["sleep", "600"]))
        assert pair.transfer(nbytes=200_000).throughput_bps > 0

    def test_fails(tcpnet):
        pair = tcpnet.pair(link=Link(rate="20mbit"), server=Host(cc="reno"))
        _record(pair, pair.server.popen(["sleep", "600"]))
        assert False, "deliberate failure"

    def test_interrupted(tcpnet):
        pair = tcpnet.pair(link=Link(rate="20mbit"))
        _record(pair, pair.client.popen(["sleep", "600"]))
        with open(MARK + ".ready", "w"):
            pass
        time.sleep(600)
""")


@pytest.fixture
def project(tmp_path):
    (tmp_path / "test_project.py").write_text(PROJECT)
    return tmp_path


def _session(children, project, selection):
    # This checkout's pytest_tcpnet first: the installed one may belong to another checkout.
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(
        os.environ,
        TCPNET_TEST_MARK=str(project / "mark.txt"),
        PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p),
    )
    return children.popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-k", selection, "test_project.py"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _interrupted_session_in_its_test(children, project):
    """Start the session that blocks inside a test with a lab built; return once it is there."""
    proc = _session(children, project, "interrupted")
    children.wait_until(proc, (project / "mark.txt.ready").exists, 60, "its test built a lab")
    return proc


def _assert_nothing_left(project, before):
    leftovers = []
    for line in (project / "mark.txt").read_text().splitlines():
        pid, *namespaces = line.split()
        if os.path.exists(f"/proc/{pid}"):
            leftovers.append(f"process {pid} still runs")
        leftovers += [f"namespace {n} still exists" for n in namespaces if n in netlink.lab_namespaces()]
    assert leftovers == []
    assert hoststate.differences(before, hoststate.snapshot()) == []


def test_sessions_that_pass_and_fail_leave_nothing(children, project):
    before = hoststate.snapshot()
    proc = _session(children, project, "passes or fails")
    out, _ = children.communicate(proc, timeout=120)
    assert proc.returncode == 1, out
    assert "1 failed, 1 passed" in out
    _assert_nothing_left(project, before)


def test_ctrl_c_leaves_nothing(children, project):
    before = hoststate.snapshot()
    proc = _interrupted_session_in_its_test(children, project)
    proc.send_signal(signal.SIGINT)  # what Ctrl-C delivers to the foreground pytest
    out, _ = children.communicate(proc, timeout=60)
    assert proc.returncode == 2, out  # pytest's "interrupted"
    assert "KeyboardInterrupt" in out
    _assert_nothing_left(project, before)


def test_sweeper_removes_what_a_killed_session_left(children, project):
    before = hoststate.snapshot()
    proc = _interrupted_session_in_its_test(children, project)
    proc.kill()  # SIGKILL: no teardown runs at all
    proc.communicate(timeout=30)
    pid, *namespaces = (project / "mark.txt").read_text().split()
    left = [n for n in namespaces if n in netlink.lab_namespaces()]
    removed = netlink.sweep_stale_namespaces()
    # Under xdist another worker's Lab() may sweep first; either way ours must have removed what was left.
    assert set(left) <= set(removed) or not any(n in netlink.lab_namespaces() for n in left)
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)  # the sleeper was SIGKILLed; give the kernel a moment to reap it
    _assert_nothing_left(project, before)
