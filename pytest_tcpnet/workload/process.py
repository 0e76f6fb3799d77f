"""Start and stop processes inside a lab namespace, tracking each by pid."""

import os
import signal
import subprocess

from ..errors import LabError, program_path
from ..netlink import ownership

__all__ = ["NamespaceProcesses", "nsenter_path"]


def nsenter_path():
    """Path of util-linux's nsenter, which enters the namespace and execs (no extra process)."""
    return program_path("nsenter", package="util-linux", description="util-linux's nsenter")


class NamespaceProcesses:
    """The processes one node started; stops them (and only them) by pid on close."""

    def __init__(self, namespace_path):
        self._netns = namespace_path
        self._namespace = os.path.basename(namespace_path)
        self._running = []
        self._adopted = []

    @property
    def netns_path(self):
        """The namespace's bind-mount path (what nsenter --net= and setns take)."""
        return self._netns

    def adopt(self, child):
        """Track a process started another way (an object with .pid and .stop()), so stop_all stops it too."""
        self._adopted.append(child)
        try:
            ownership.record_process(self._namespace, child.pid)
        except (OSError, LabError):
            pass  # already exited, or no records directory: nothing to sweep later

    def popen(self, argv, **kwargs):
        """subprocess.Popen of argv inside the namespace, in its own process group."""
        if isinstance(argv, str):
            raise TypeError("argv: pass a list of arguments (use ['sh', '-c', '...'] for a shell command)")
        kwargs.setdefault("start_new_session", True)  # so stop() can end its children too
        try:
            proc = subprocess.Popen([nsenter_path(), f"--net={self._netns}", "--", *argv], **kwargs)
        except OSError as exc:
            raise LabError(f"cannot start {argv[0]!r} in {self._netns}: {exc}") from exc
        self._running.append(proc)
        # Recorded (pid + start time) so a sweeper can end it, and only it, if this process dies.
        try:
            ownership.record_process(self._namespace, proc.pid)
        except (OSError, LabError):
            pass  # already exited (no /proc entry), or no records directory: nothing to sweep later
        return proc

    def run(self, argv, *, timeout=60, check=False, **kwargs):
        """Run argv to completion inside the namespace; a timeout stops it and raises LabError."""
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        kwargs.setdefault("text", True)
        proc = self.popen(argv, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop(proc)
            raise LabError(f"{argv!r} did not finish within {timeout} s in {self._netns}; stopped it") from None
        finally:
            if proc.returncode is not None and proc in self._running:
                self._running.remove(proc)
                ownership.forget_process(self._namespace, proc.pid)
        result = subprocess.CompletedProcess(argv, proc.returncode, out, err)
        if check:
            result.check_returncode()
        return result

    def stop(self, proc, grace=1.0):
        """Stop one process we started: SIGTERM to its group, SIGKILL after a grace period."""
        if proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)  # the group we created with start_new_session
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream:
                stream.close()
        if proc in self._running:
            self._running.remove(proc)
        if proc.returncode is not None:
            ownership.forget_process(self._namespace, proc.pid)

    def exited(self):
        """["argv0 (exit N)"] of the programs started here with popen that have exited (a server that died at
        start-up is why nothing listens)."""
        return [
            f"{os.path.basename(str(p.args[3]))} (exit {p.returncode})" for p in self._running if p.poll() is not None
        ]

    def pids(self):
        """Pids of the processes this node started (popen'd, or forked for workloads) that still run."""
        return [p.pid for p in self._running if p.poll() is None] + [c.pid for c in self._adopted if c.running()]

    def release(self, child):
        """Stop one adopted child and forget it."""
        child.stop()
        ownership.forget_process(self._namespace, child.pid)
        if child in self._adopted:
            self._adopted.remove(child)

    def stop_all(self):
        """Stop every process this node started that still runs."""
        for proc in list(self._running):
            self.stop(proc, grace=0.2)
        for child in list(self._adopted):
            self.release(child)
