"""SIGTERM (what CI timeouts, systemd and `kill` send) tears the labs down like Ctrl-C does."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pytest_tcpnet
from pytest_tcpnet import netlink

pytestmark = pytest.mark.tcpnet_needs("privilege")

PROJECT = textwrap.dedent("""
    import os, time
    from pytest_tcpnet import Link

    def test_sleeps_with_a_pair(tcpnet, worker_id):
        pair = tcpnet.pair(link=Link(rate="20mbit"))
        sleeper = pair.server.popen(["sleep", "600"])
        with open(os.environ["TCPNET_TEST_MARK"] + "." + worker_id, "w") as f:
            f.write(" ".join([str(os.getpid()), str(sleeper.pid)] + [n.namespace for n in pair.nodes]))
        time.sleep(600)

    test_second = test_sleeps_with_a_pair
""")
# The project's own copy of the plugin, whatever is installed.
REPO = os.path.dirname(os.path.dirname(pytest_tcpnet.__file__))


def _session(children, tmp_path, *args):
    (tmp_path / "test_project.py").write_text(PROJECT)
    (tmp_path / "conftest.py").write_text(
        "import pytest\n@pytest.fixture\ndef worker_id(request):\n"
        "    return getattr(request.config, 'workerinput', {}).get('workerid', 'main')\n"
    )
    env = dict(os.environ, TCPNET_TEST_MARK=str(tmp_path / "mark"), PYTHONPATH=REPO)
    return children.popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args, "test_project.py"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def _wait_for_marks(children, proc, tmp_path, count):
    children.wait_until(proc, lambda: len(list(tmp_path.glob("mark.*"))) >= count, 90, f"{count} tests built labs")
    time.sleep(0.2)  # the marks are written; let the tests reach their sleep
    return [mark.read_text().split() for mark in tmp_path.glob("mark.*")]


def _leftovers(marks):
    found = []
    for session_pid, sleeper_pid, *namespaces in marks:  # the pytest process (or xdist worker) and its sleeper
        for pid in (session_pid, sleeper_pid):
            deadline = time.monotonic() + 5
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.05)
            if os.path.exists(f"/proc/{pid}"):
                found.append(f"process {pid}")
        found += [f"namespace {n}" for n in namespaces if n in netlink.lab_namespaces()]
    return found


def test_sigterm_to_pytest_tears_the_lab_down(children, tmp_path):
    proc = _session(children, tmp_path, "-k", "sleeps")
    marks = _wait_for_marks(children, proc, tmp_path, 1)
    proc.send_signal(signal.SIGTERM)
    out, _ = children.communicate(proc, timeout=60)
    assert proc.returncode == 2, out  # pytest's "interrupted", after its teardown
    assert "SIGTERM: tearing the labs down" in out
    assert _leftovers(marks) == []


def test_sigterm_to_every_xdist_process_tears_every_lab_down(children, tmp_path):
    proc = _session(children, tmp_path, "-n", "2")
    marks = _wait_for_marks(children, proc, tmp_path, 2)
    os.killpg(proc.pid, signal.SIGTERM)  # a CI timeout or systemd stopping the whole process group
    out, _ = children.communicate(proc, timeout=60)
    assert proc.returncode == 2, out
    assert _leftovers(marks) == []


def test_sigterm_to_the_xdist_controller_alone_tears_every_lab_down(children, tmp_path):
    proc = _session(children, tmp_path, "-n", "2")
    marks = _wait_for_marks(children, proc, tmp_path, 2)
    proc.send_signal(signal.SIGTERM)
    out, _ = children.communicate(proc, timeout=60)
    assert proc.returncode == 2, out
    assert _leftovers(marks) == []
