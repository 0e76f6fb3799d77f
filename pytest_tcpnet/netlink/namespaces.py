"""Named network namespaces: create, enter from a thread, remove, sweep what dead owners provably left."""

import concurrent.futures
import ctypes
import errno
import os
import threading

from pyroute2 import netns as _netns

from .. import interrupts
from ..errors import LabError
from . import ownership
from .session import (
    NamespaceSession,
    _sysctl_path,
    check_sysctls,
    close_sessions,
    read_sysctls_here,
    session_for,
    write_sysctls_here,
)

__all__ = [
    "NETNS_DIR",
    "PREFIX",
    "create_namespace",
    "create_namespaces",
    "remove_namespace",
    "remove_namespaces",
    "namespace_path",
    "run_in_namespace",
    "owner_tag",
    "lab_namespaces",
    "sweep_stale_namespaces",
    "pids_in_namespace",
    "write_sysctls",
    "read_sysctls",
    "sysctl_exists",
    "with_iproute",
    "call_in_own_thread",
    "submit_in_namespace",
]

NETNS_DIR = "/var/run/netns"
#: Every namespace the plugin creates starts with this (a convenience for people; ownership is
#: proven by the records in ownership.STATE_DIR, never by the name).
PREFIX = "tcpnet-"


_process_start_ticks = ownership.process_start_ticks


def owner_tag(pid=None):
    """'PID.START': identifies the owning process across pid reuse; goes into every namespace name."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{_process_start_ticks(pid)}"


def namespace_path(name):
    """The bind-mount path of a named namespace (what nsenter --net= and setns take)."""
    return os.path.join(NETNS_DIR, name)


def create_namespace(name, sysctls=None):
    """Create a named network namespace (like `ip netns add`, without a fork), recorded as ours; fail if the name exists.

    Its session (a thread living in it, with its netlink sockets) serves every later call on
    this namespace until remove_namespace(name).
    """
    if os.path.lexists(namespace_path(name)):
        raise LabError(f"network namespace {name!r} already exists")
    return NamespaceSession.create(name, sysctls)


def create_namespaces(sysctls_by_name):
    """Create several namespaces concurrently ({name: sysctls or None}); all or none."""
    for name in sysctls_by_name:
        if os.path.lexists(namespace_path(name)):
            raise LabError(f"network namespace {name!r} already exists")
    return NamespaceSession.create_many(sysctls_by_name)


def remove_namespace(name):
    """Remove a named namespace; a namespace already gone is not an error."""
    remove_namespaces([name])


def remove_namespaces(names):
    """Remove several named namespaces, their sessions closed side by side; raise the first error after trying all."""
    failure = None
    sessions = [s for s in map(session_for, names) if s is not None]
    try:
        close_sessions(sessions)
    except BaseException as exc:
        failure = exc
    with_session = {s.name for s in sessions}
    for name in names:
        if name not in with_session:
            try:
                _remove_without_session(name)
            except BaseException as exc:
                failure = failure or exc
    if failure is not None:
        raise failure


def _remove_without_session(name):
    try:
        ownership.unmount_namespace(name)
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.EINVAL):
            raise
    if ownership.namespace_records().get(name, {}).get("owner_pid") == os.getpid():
        ownership.forget_namespace(name)


def call_in_own_thread(enter_namespace, function, *args, name="tcpnet-netns"):
    """Run enter_namespace() then function(*args) in a fresh thread; return the result, re-raise its error.

    setns()/unshare(CLONE_NEWNET) change only the calling thread, so the caller's own
    sockets and /proc/sys view stay in the namespace they were in.
    """
    return interrupts.result(submit_in_own_thread(enter_namespace, function, *args, name=name))


def submit_in_own_thread(enter_namespace, function, *args, name="tcpnet-netns", **kwargs):
    """Start a fresh daemon thread that runs enter_namespace() then function(*args, **kwargs); a Future of it.

    The thread ends with the function: a thread that entered a lab namespace never serves
    anything else, so nothing meant for the host can run in a lab by mistake (nor the reverse).
    """
    future = concurrent.futures.Future()
    future.set_running_or_notify_cancel()

    def body():
        try:
            enter_namespace()
            result = function(*args, **kwargs)
        except BaseException as exc:  # re-raised by future.result() in the caller's thread
            future.set_exception(exc)
        else:
            future.set_result(result)

    threading.Thread(target=body, name=name, daemon=True).start()
    return future


def submit_in_namespace(name, function, *args, **kwargs):
    """function(*args, **kwargs) in a fresh thread inside the named namespace (see submit_in_own_thread); a Future."""
    return submit_in_own_thread(_enterer(name), function, *args, name=f"tcpnet-in-{name}", **kwargs)


def _enterer(name):
    def enter():
        fd = os.open(namespace_path(name), os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(fd)
        finally:
            os.close(fd)

    return enter


def run_in_namespace(name, function, *args, own_thread=False):
    """Call function(*args) inside the named namespace: in its session's thread, else a short-lived thread.

    own_thread=True always uses a fresh thread: for long-running work (a sampler's loop) that must
    not hold the session's one thread while other calls for the namespace wait behind it.
    """
    session = None if own_thread else session_for(name)
    if session is not None:
        return session.call(f"running {getattr(function, '__name__', 'a function')}", function, *args)
    return interrupts.result(submit_in_namespace(name, function, *args))


def with_iproute(name, function, step="netlink request"):
    """Call function(ipr) with an IPRoute socket inside namespace `name` (the session's, if it has one).

    Without a session, one is opened from a thread that entered the namespace; IPRoute(netns=...)
    would fork a helper process for the same socket, several times slower and far more so in a VM
    (benchmarks/NOTES.md).
    """
    session = session_for(name)
    if session is not None:
        return session.call(step, lambda: function(session.ipr))
    from pyroute2 import IPRoute

    def call():
        with IPRoute() as ipr:
            return function(ipr)

    return run_in_namespace(name, call)


def _setns(fd):
    libc = _netns._get_libc()
    if libc.syscall(_netns.__NR_setns, fd, _netns.CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def sysctl_exists(name):
    """True if this kernel has the sysctl (checked in the caller's namespace, read-only)."""
    return os.path.exists(_sysctl_path(name))


def write_sysctls(name, values):
    """Write sysctls inside namespace `name`; raise LabError naming the one the kernel refused."""

    check_sysctls(values)
    session = session_for(name)
    if session is not None:
        return session.write_sysctls(values)

    run_in_namespace(name, write_sysctls_here, name, values)


def read_sysctls(name, keys):
    """Read sysctls inside namespace `name` as {key: text}; a missing one reads as None."""

    session = session_for(name)
    if session is not None:
        return session.read_sysctls(keys)

    return run_in_namespace(name, read_sysctls_here, keys)


def lab_namespaces():
    """Names of every namespace named like ours (tcpnet-*), whoever made it: for leak checks, not for deleting."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(PREFIX))
    except FileNotFoundError:
        return []


def pids_in_namespace(name):
    """Pids of processes whose network namespace is `name` (found via the nsfs inode)."""
    try:
        target = os.stat(namespace_path(name))
    except FileNotFoundError:
        return []
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev):
            pids.append(int(entry))
    return pids


def sweep_stale_namespaces():
    """Remove what dead pytest-tcpnet processes provably left (ownership records), nothing else; return the names.

    A look-alike (`ip netns add tcpnet-mine`) has no record and is never touched, nor is any
    process we did not record starting.
    """
    return ownership.sweep()


def read_host_sysctls(keys):
    """{key: text} of sysctls as this process's own namespace (the host's) sees them; read-only."""
    return read_sysctls_here(keys)
