"""Child processes and nested sessions that a test owns: killed, with everything they started, on any failure.

A test that starts a transfer or a nested pytest session and then fails (an assertion, a
timeout) must not leave it running: an orphaned 50 MB transfer at 1 Mbit/s ran on for minutes
and held a machine-wide measurement slot that later tests queued for. Every child starts in a
process group of its own, so xdist workers and anything else it forked go with it; the
`children` fixture kills what is still running at teardown, then sweeps the labs of owners
that are now dead (the kill gives them no teardown).
"""

import os
import signal
import subprocess
import sys
import time

from pytest_tcpnet.vm.launch import _group_alive  # the VM runner's own check that a process group still runs

__all__ = ["Children", "STACKS_ON_SIGUSR1", "default_sigint"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: Prepended to a child's Python code: SIGUSR1 prints every thread's stack to stderr (what a hung child was doing).
STACKS_ON_SIGUSR1 = "import faulthandler, signal; faulthandler.register(signal.SIGUSR1, all_threads=True)\n"


def default_sigint():
    """In a child before exec: Ctrl-C's default disposition, as a terminal gives it.

    A shell runs background jobs with SIGINT ignored, and an ignored signal stays ignored across
    exec: Python then installs no KeyboardInterrupt handler, and a test that sends SIGINT
    measures nothing (every Ctrl-C test failed in a CI run started with `&`).
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def checkout_env(**extra):
    """os.environ with this checkout's pytest_tcpnet first on PYTHONPATH (an installed copy may be another's)."""
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **{k: str(v) for k, v in extra.items()})


class Children:
    """The processes one test started; `close()` kills the groups of those still running and sweeps their labs."""

    def __init__(self):
        self._procs = []

    def popen(self, argv, **kwargs):
        """subprocess.Popen in a new process group (text mode), owned by this test."""
        kwargs.setdefault("text", True)
        proc = subprocess.Popen(argv, start_new_session=True, preexec_fn=default_sigint, **kwargs)
        self._procs.append(proc)
        return proc

    def run(self, argv, *, timeout, **kwargs):
        """Like subprocess.run(capture_output=True): on timeout the whole group is killed and the test fails
        with what the child printed (its stacks too, if it registered STACKS_ON_SIGUSR1)."""
        proc = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
        out, err = self.communicate(proc, timeout)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def wait_until(self, proc, ready, timeout, what):
        """Poll `ready()` until true; fail (with the child's output, its group killed) if it exits or `timeout` passes."""
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                out, err = proc.communicate()
                import pytest

                pytest.fail(
                    f"{_name(proc)} exited ({proc.returncode}) before {what}:\n{(out or '')[-6000:]}"
                    f"{(err or '')[-6000:]}"
                )
            if time.monotonic() > deadline:
                self.communicate(proc, timeout=0.01)  # fails with its stacks, its group killed
            time.sleep(0.05)

    def communicate(self, proc, timeout):
        """proc.communicate(timeout); on timeout: stacks (SIGUSR1), kill the group, fail with its output."""
        try:
            return proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._signal(proc, signal.SIGUSR1)
            time.sleep(1.0)
            self._signal(proc, signal.SIGKILL)
            out, err = proc.communicate()
            import pytest

            pytest.fail(
                f"{_name(proc)} did not finish within {timeout} s; killed its process group.\n"
                f"--- stdout ---\n{(out or '')[-6000:]}\n--- stderr ---\n{(err or '')[-12000:]}"
            )

    @staticmethod
    def _signal(proc, sig):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self):
        """Kill every group still running (its leader may have exited and left the rest), wait, sweep."""
        killed = False
        for proc in self._procs:
            proc.poll()  # reap an exited leader first: a zombie still counts as a member of its group
            if _group_alive(proc.pid):
                self._signal(proc, signal.SIGKILL)
                killed = True
                proc.wait()
        self._procs.clear()
        if killed:
            # The killed children had no teardown: their namespaces are removed by the sweeper (dead owners only).
            subprocess.run(
                [sys.executable, "-m", "pytest_tcpnet.cleanup"],
                env=checkout_env(),
                cwd=ROOT,
                capture_output=True,
                timeout=120,
            )
        return killed


def _name(proc):
    args = proc.args if isinstance(proc.args, (list, tuple)) else [proc.args]
    return " ".join(str(a) for a in args)[:200]
