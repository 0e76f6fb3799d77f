"""Run workload code in a child process inside a lab namespace, forked from a preloaded zygote.

A fresh interpreter per flow costs seconds in a software-emulated VM (a stdlib-only
`python -c 'import socket, json'` took 4.1 s there). One zygote process per session imports
the flow code once; every flow is a fork of it (milliseconds) that enters the namespace with
setns() and reports dict messages on a pipe. The zygote is single-threaded, so forking it is
safe where forking the pytest process (threads) is not; unlike multiprocessing's forkserver
it never re-imports the caller's __main__ (a script, or pytest) in the child.
"""

import ctypes
import importlib
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback
from multiprocessing.connection import Connection

from .. import interrupts
from ..errors import LabError

__all__ = ["NamespaceChild", "SpawnedCall", "zygote_pid", "importable_name"]

_CLONE_NEWNET = 0x40000000
_HEADER = struct.Struct("!I")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# -- inside the zygote and its children ---------------------------------------------------------------


def _enter_namespace(path):
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


def _run_child(request, conn):
    """In the forked child: enter the namespace, place it on a CPU, run the target, report errors."""
    try:
        _enter_namespace(request["netns"])
        if request["cpu"] is not None:
            os.sched_setaffinity(0, {request["cpu"]})
        if request["nice"]:
            os.nice(request["nice"])
        module, name = request["target"].rsplit(".", 1)
        getattr(importlib.import_module(module), name)(conn, **request["kwargs"])
    except BaseException:
        try:
            conn.send({"event": "error", "error": traceback.format_exc(limit=4)})
        except OSError:
            pass


def _read_request(control):
    data, fds, _, _ = socket.recv_fds(control, 65536, 1)
    if not data:
        return None, None
    (length,) = _HEADER.unpack_from(data)
    data = data[_HEADER.size :]
    while len(data) < length:
        more = control.recv(length - len(data))
        if not more:
            return None, None
        data += more
    return pickle.loads(data), fds[0]


def serve(control_fd):
    """The zygote's loop: fork a child per request until the parent goes away, then stop the children."""
    control = socket.socket(fileno=control_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps exited children: no zombies
    children = set()
    while True:
        request, fd = _read_request(control)
        if request is None:
            break
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            conn = Connection(fd, readable=False)
            _run_child(request, conn)
            conn.close()
            os._exit(0)
        os.close(fd)
        children.add(pid)
        control.sendall(struct.pack("!i", pid))
    # The parent closed the socket or died: nothing of ours may outlive it.
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def run_function(conn, *, function, args, kwargs, sys_path):
    """In a forked child: import `function` ("module:qualname") as the parent could, call it, send back the result."""
    sys.path[:0] = [p for p in sys_path if p not in sys.path]
    module, qualname = function.split(":")
    target = importlib.import_module(module)
    for part in qualname.split("."):
        target = getattr(target, part)
    conn.send({"event": "started"})
    try:
        value = target(*args, **kwargs)
    except BaseException as exc:
        try:
            error = pickle.dumps(exc)
        except Exception:
            error = None
        conn.send({"event": "raised", "error": error, "text": traceback.format_exc(limit=8)})
        return
    try:
        conn.send({"event": "result", "value": value})
    except Exception as exc:  # pickling the result failed: say so instead of dying mute
        conn.send(
            {
                "event": "raised",
                "error": None,
                "text": f"the result of {function} cannot be sent back (pickle): {type(exc).__name__}: {exc}",
            }
        )


# -- in the parent ----------------------------------------------------------------------------------


def importable_name(fn):
    """ "module:qualname" of a module-level function a forked child can import by name; TypeError otherwise."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not callable(fn) or not module or not qualname:
        raise TypeError(f"fn: expected a function, got {fn!r}")
    if module == "__main__" or "<" in qualname:
        raise TypeError(
            f"fn: spawn runs {qualname!r} in a process forked from the plugin's zygote, which imports it "
            f"by name: it must be defined at module level in an importable module (not __main__, a lambda "
            f"or a nested function); call() and submit() run any callable in a thread"
        )
    return f"{module}:{qualname}"


class _Zygote:
    """The parent's handle on its zygote process (one per process, started on first use)."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(
                [_PACKAGE_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            ),
        )
        code = "import sys; from pytest_tcpnet.workload import flows, spawn; spawn.serve(int(sys.argv[1]))"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        theirs.close()
        self._control = ours
        self._lock = threading.Lock()
        self.owner = os.getpid()

    def fork(self, request):
        """Ask for one child running request's target; return (pid, the read end of its message pipe)."""
        read_fd, write_fd = os.pipe()
        payload = pickle.dumps(request)
        try:
            with self._lock:
                socket.send_fds(self._control, [_HEADER.pack(len(payload)) + payload], [write_fd])
                reply = b""
                while len(reply) < 4:
                    chunk = self._control.recv(4 - len(reply))
                    if not chunk:
                        raise LabError(
                            f"the workload zygote (pid {self.process.pid}) exited "
                            f"({self.process.poll()}); see its stderr above"
                        )
                    reply += chunk
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        return struct.unpack("!i", reply)[0], Connection(read_fd, writable=False)

    def close(self):
        """Closing the control socket makes the zygote stop its children and exit."""
        self._control.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()


_zygote = None
_zygote_lock = threading.Lock()


def _the_zygote():
    global _zygote
    with _zygote_lock:
        if _zygote is None or _zygote.owner != os.getpid() or _zygote.process.poll() is not None:
            _zygote = _Zygote()
        return _zygote


def zygote_pid():
    """The pid of this process's zygote, starting it if needed (for benchmarks and leak checks)."""
    return _the_zygote().process.pid


class SpawnedCall:
    """A function running in a forked child inside a namespace (Node.spawn): .pid, .result(timeout), .stop()."""

    def __init__(self, child, function):
        self._child = child
        self.function = function
        self.pid = child.pid
        self._outcome = None

    def result(self, timeout=None):
        """The function's return value (its exception re-raised); LabError if it does not finish within `timeout`."""
        if self._outcome is None:
            deadline = None if timeout is None else time.monotonic() + timeout
            message = {"event": "started"}
            while message is not None and message["event"] == "started":
                message = self._child.next_message(deadline)
            if message is None:
                raise LabError(
                    f"{self.function} in {self._child.name} (pid {self.pid}) did not return within "
                    f"{timeout} s; it runs on until stop() or the pair's close"
                )
            self._outcome = message
            self._child.stop()
        event, where = self._outcome["event"], f"{self.function} in {self._child.name} (pid {self.pid})"
        if event == "result":
            return self._outcome["value"]
        if event == "raised" and self._outcome["error"] is not None:
            try:
                exc = pickle.loads(self._outcome["error"])
            except Exception:  # an exception type that pickles but does not rebuild: its text stands in
                exc = None
            if isinstance(exc, BaseException):
                exc.add_note(f"raised by {where}:\n{self._outcome['text']}")
                raise exc
        if event == "raised":
            raise LabError(f"{where} failed:\n{self._outcome['text']}")
        if event == "error":  # the child could not enter the namespace or import the function
            raise LabError(f"{where} could not start:\n{self._outcome['error']}")
        raise LabError(f"{where} exited without a result (killed, or os._exit)")

    def running(self):
        """True until the child exits."""
        return self._child.running()

    def stop(self):
        """Stop the child (SIGTERM, then SIGKILL); idempotent."""
        self._child.stop()


class NamespaceChild:
    """One forked child running `target(conn, **kwargs)` inside a namespace; its messages come back as dicts."""

    def __init__(self, netns_path, target, kwargs, *, name, cpu=None, nice=0):
        self.name = name
        request = {
            "netns": netns_path,
            "target": f"{target.__module__}.{target.__qualname__}",
            "kwargs": kwargs,
            "cpu": cpu,
            "nice": nice,
        }
        self.pid, self._conn = _the_zygote().fork(request)
        try:
            # A pidfd pins the child (no signal can reach a reused pid) and wakes a waiter the moment it exits.
            self._pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            self._pidfd = None  # exited and reaped already

    def receive(self, deadline, expect):
        """The next message, which must be of event `expect`; LabError naming this child otherwise."""
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not interrupts.wait(self._conn.poll, remaining):
            self.stop()
            raise LabError(f"{self.name} (pid {self.pid}) sent no {expect!r} before the deadline; stopped it")
        try:
            message = self._conn.recv()
        except EOFError:
            raise LabError(f"{self.name} (pid {self.pid}) exited before sending {expect!r}") from None
        if message.get("event") == "error":
            raise LabError(f"{self.name} (pid {self.pid}) failed:\n{message['error']}")
        if message.get("event") != expect:
            raise LabError(f"{self.name} (pid {self.pid}) sent {message.get('event')!r}, expected {expect!r}")
        return message

    def next_message(self, deadline=None):
        """The next message as a dict: None if none came before `deadline` (monotonic; None: wait), or
        {"event": "exited"} once the child has gone without another."""
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not interrupts.wait(self._conn.poll, remaining):
            return None
        try:
            return self._conn.recv()
        except EOFError:
            return {"event": "exited"}

    def running(self):
        """True until the child exits."""
        return self._wait_exit(0) is False

    def _wait_exit(self, timeout):
        """True once the child has exited (waiting up to `timeout` seconds for it), else False."""
        if self._pidfd is None:
            return True
        poller = select.poll()
        poller.register(self._pidfd, select.POLLIN)  # a pidfd turns readable when its process exits
        return bool(poller.poll(timeout * 1000))

    def stop(self, grace=0.2):
        """SIGTERM, then SIGKILL after `grace` seconds; idempotent."""
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            if not self.running():
                break
            try:
                signal.pidfd_send_signal(self._pidfd, sig)
            except ProcessLookupError:
                break
            self._wait_exit(wait)
        if self._pidfd is not None and not self.running():
            os.close(self._pidfd)
            self._pidfd = None
        if not self._conn.closed:
            self._conn.close()
