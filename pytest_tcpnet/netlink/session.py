"""One long-lived netlink session per namespace: a thread living in it, its sockets, its errors.

pyroute2 0.9 keeps a socket *per calling thread* (IPRoute opens a new one, in the caller's
current namespace, the first time a thread uses it), so an IPRoute opened in a namespace and
then used from the main thread silently talks to the host namespace. A session therefore owns
one worker thread that entered (or created) the namespace and runs every pyroute2 call there;
sysctls are plain file writes, and no call starts a thread or a process (the thread is a
recycled one, see _Worker). Plain sockets are not tied to a thread: the session's NETLINK_ROUTE
socket (rtnl.py) and ethtool socket, opened inside the namespace at creation, serve any thread
directly, which is how a path is built and measured without a hop. Netlink and OS errors become
LabError / MissingCapability, naming the step and the namespace, in this one place.
"""

import concurrent.futures
import contextlib
import ctypes
import errno
import fcntl
import os
import queue
import threading
import time

from pyroute2 import IPRoute
from pyroute2.ethtool.ioctl import ETH_SS_FEATURES, IoctlEthtool
from pyroute2.netlink.exceptions import NetlinkError

from .. import interrupts
from ..errors import LabError, MissingCapability
from ..model.specs import _CONTROL_CHARACTERS as _SYSCTL_VALUE_REFUSED
from ..model.specs import _SYSCTL_NAME as _SYSCTL_KEY
from . import ownership
from .rtnl import RtnlSocket

__all__ = ["NamespaceSession", "session_for", "translate_errors", "close_sessions"]

_CLONE_NEWNET = 0x40000000
_MS_BIND, _MS_REC, _MS_SHARED = 0x1000, 0x4000, 1 << 20
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p)
_sessions: dict = {}
_sessions_lock = threading.Lock()
_netns_dir_ready = False


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


@contextlib.contextmanager
def translate_errors(step, namespace):
    """Turn a netlink or OS error of `step` into the project's errors, naming the step and the namespace."""
    try:
        yield
    except MissingCapability:
        raise
    except LabError as exc:
        if namespace in str(exc):
            raise
        raise LabError(f"{step} in namespace {namespace} failed: {exc}") from exc
    except NetlinkError as exc:
        if exc.code in (errno.EPERM, errno.EACCES):
            raise MissingCapability("privilege", f"{step} in namespace {namespace}: {exc}") from exc
        raise LabError(f"{step} in namespace {namespace} failed: {exc}") from exc
    except OSError as exc:
        if exc.errno in (errno.EPERM, errno.EACCES):
            raise MissingCapability("privilege", f"{step} in namespace {namespace}: {exc.strerror or exc}") from exc
        raise LabError(f"{step} in namespace {namespace} failed: {exc.strerror or exc}") from exc


def _prepare_netns_dir():
    """Make /var/run/netns a shared mount point once, as `ip netns add` does (iproute2 ip/ipnetns.c).

    Shared propagation lets an unmount in one mount namespace reach the others, so a deleted
    namespace is freed at once; the flock keeps concurrent creators from stacking bind mounts.
    """
    global _netns_dir_ready
    if _netns_dir_ready:
        return
    os.makedirs(ownership.NETNS_DIR, mode=0o755, exist_ok=True)
    lock = os.open(ownership.NETNS_DIR, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        target = ownership.NETNS_DIR.encode()
        made_mount_point = False
        while _libc.mount(b"", target, b"none", _MS_SHARED | _MS_REC, None) != 0:
            err = ctypes.get_errno()
            if err != errno.EINVAL or made_mount_point:
                raise OSError(err, f"mount --make-rshared {ownership.NETNS_DIR}: {os.strerror(err)}")
            _check(_libc.mount(target, target, b"none", _MS_BIND | _MS_REC, None), f"bind {ownership.NETNS_DIR}")
            made_mount_point = True
    finally:
        os.close(lock)
    _netns_dir_ready = True


class NamespaceSession:
    """A named network namespace and the thread + sockets that work in it, for the namespace's whole life."""

    def __init__(self, name):
        self.name = name
        self.path = os.path.join(ownership.NETNS_DIR, name)
        self.owned = False  # True once this session created (and recorded) the namespace
        self.created_with = {}  # the sysctls written when this session created the namespace
        self._worker = _Worker.take()
        self._released = None  # once closing: a future done when the worker has left the namespace
        self._ipr = None
        self._ethtool = None
        self._rtnl = None
        self._resources = {}
        self.thread_id = None
        self._ethtool_lock = threading.Lock()
        self._indexes = {}

    # -- life cycle ---------------------------------------------------------------------------
    @classmethod
    def create(cls, name, sysctls=None):
        """Create namespace `name` (unshare + bind mount, no fork), recorded as ours; set sysctls; bring lo up."""
        return cls.create_many({name: sysctls})[0]

    @classmethod
    def create_many(cls, sysctls_by_name):
        """Create several namespaces at once, each by its own session thread; all or none (the made ones are removed)."""
        sessions = [cls(name) for name in sysctls_by_name]
        futures = [s._worker.submit(s._create_here, sysctls_by_name[s.name] or {}) for s in sessions]
        failure = None
        for session, future in zip(sessions, futures):
            try:
                with translate_errors(f"creating namespace {session.name}", session.name):
                    interrupts.result(future)
            except BaseException as exc:
                failure = failure or exc
        if failure is not None:
            # A Ctrl-C leaves the wait at once, but a session thread may still be making its namespace: discarded
            # now, it would be mounted after the discard and outlive us (docs/safety.md, "Ctrl-C that the interpreter
            # drops"). Creation takes milliseconds; a second Ctrl-C meanwhile does not cut this short.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    if not concurrent.futures.wait(futures, timeout=deadline - time.monotonic()).not_done:
                        break
                except KeyboardInterrupt:
                    continue
            for session in sessions:
                session._discard()
            raise failure
        for session in sessions:
            _register(session)
        return sessions

    def _create_here(self, sysctls):
        _prepare_netns_dir()
        if os.path.lexists(self.path):
            raise LabError(f"network namespace {self.name!r} already exists")
        _check(_libc.unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
        st = os.stat("/proc/thread-self/ns/net")
        # Recorded before the name exists, so a kill at any later point leaves a provable leftover.
        ownership.record_namespace(self.name, st.st_ino, st.st_dev)
        self.owned = True
        try:
            os.close(os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_EXCL, 0))
        except FileExistsError:
            ownership.forget_namespace(self.name)
            self.owned = False
            raise LabError(f"network namespace {self.name!r} already exists") from None
        _check(
            _libc.mount(b"/proc/thread-self/ns/net", self.path.encode(), b"none", _MS_BIND, None),
            f"bind mount {self.path}",
        )
        self._write_sysctls_here(sysctls)
        self.created_with = dict(sysctls)
        self._open_sockets()
        self._rtnl.batch([("link", "set", {"index": 1, "state": "up"})])  # lo is always ifindex 1 in a new namespace

    def _open_sockets(self):
        self.thread_id = threading.get_native_id()  # /proc/PID/task/TID/net shows this namespace to any thread
        # Both are plain sockets of the namespace they are opened in, usable from any thread after.
        self._rtnl = RtnlSocket()
        self._ethtool = _Ethtool()

    def close(self):
        """Close the sockets and release the thread; remove the namespace if this session created it."""
        close_sessions([self])

    def _stop(self):
        # The thread closes its sockets (pyroute2's must be closed by it) and leaves, unwaited here.
        if self._released is not None:
            return  # released once only: a worker idle twice would serve two sessions
        _unregister(self)
        with contextlib.suppress(Exception):
            self._worker.submit(self._close_sockets)
        self._released = self._worker.release()

    def _remove(self):
        if self.owned:
            with translate_errors("removing the namespace", self.name):
                ownership.unmount_namespace(self.name)
            ownership.forget_namespace(self.name)
            self.owned = False

    def _discard(self):
        """Undo a half-made session (creation failed part-way)."""
        with contextlib.suppress(Exception):
            self.close()

    def _close_sockets(self):
        for sock in (self._ipr, self._ethtool, self._rtnl, *self._resources.values()):
            if sock is not None:
                with contextlib.suppress(Exception):
                    sock.close()
        self._ipr = self._ethtool = self._rtnl = None
        self._resources.clear()

    # -- running work in the namespace ------------------------------------------------------------
    def call(self, step, function, *args):
        """Run function(*args) in the session's thread (inside the namespace); errors name the step."""
        if threading.get_ident() == self._worker.thread.ident and self._released is None:
            with translate_errors(step, self.name):
                return function(*args)
        future = self.submit(step, function, *args)
        with translate_errors(step, self.name):
            return interrupts.result(future)

    @property
    def ipr(self):
        """The session's IPRoute socket (only inside the session's thread)."""
        if self._ipr is None:
            self._ipr = IPRoute()
            # topology._index's cache on the socket: share the indexes the session already knows.
            self._ipr.__dict__["_tcpnet_indexes"] = self._indexes
        return self._ipr

    def batch(self, step, requests, indexes=None):
        """Send [(mode, command, kwargs), ...] in one netlink message, from the calling thread (see rtnl.py).

        indexes: {ifname: ifindex} the requests give new interfaces, remembered once they succeed.
        """
        self.query(step, requests)
        self._indexes.update(indexes or {})

    def query(self, step, requests):
        """Like batch, returning each request's answers (pyroute2 messages), from the calling thread."""
        rtnl = self._rtnl
        if rtnl is None:
            raise LabError(f"{step}: the session of namespace {self.name} is closed")
        with translate_errors(step, self.name):
            return rtnl.query(requests)

    def resource(self, key, factory):
        """factory(), called once in the session's thread (inside the namespace) and kept; closed with the session.

        For sockets that, once opened in the namespace, any thread may use (diag.SocketTable).
        """
        found = self._resources.get(key)
        if found is None:
            found = self.call(
                f"opening {key}", lambda: self._resources.get(key) or self._resources.setdefault(key, factory())
            )
        return found

    def known_index(self, ifname):
        """The index of an interface the session created (or looked up) already, else None."""
        return self._indexes.get(ifname)

    def submit(self, step, function, *args):
        """Start function(*args) in the session's thread; returns a future (interrupts.result waits for it)."""
        if self._released is not None:
            # Its thread may serve another namespace by now.
            raise LabError(f"{step}: the session of namespace {self.name} is closed")
        future = self._worker.submit(function, *args)
        future.tcpnet_step = (step, self.name)
        return future

    def with_ethtool(self, step, function):
        """function(ethtool) on the session's ethtool ioctl socket, from the calling thread, one caller at a time.

        pyroute2's Ethtool does features through this ioctl half anyway; its netlink half would
        cost a generic-netlink family lookup per namespace and old-style flag reads we don't use.
        The socket (opened inside the namespace) works from any thread; its request buffer is shared.
        """
        with self._ethtool_lock, translate_errors(step, self.name):
            if self._ethtool is None:
                raise LabError(f"the session of namespace {self.name} is closed")
            return function(self._ethtool)

    def index(self, ifname):
        """Interface index by name (cached: a lab never renames its interfaces)."""
        index = self._indexes.get(ifname)
        if index is None:
            found = self.ipr.link_lookup(ifname=ifname)
            if not found:
                raise LabError(f"interface {ifname} not found in namespace {self.name}")
            index = self._indexes[ifname] = found[0]
        return index

    # -- sysctls --------------------------------------------------------------------------------
    def write_sysctls(self, values):
        """Write sysctls in this namespace; LabError names the one the kernel refused."""
        return self.call("writing sysctls", self._write_sysctls_here, values)

    def read_sysctls(self, keys):
        """{key: text} of sysctls in this namespace; a missing one reads as None."""
        return self.call("reading sysctls", read_sysctls_here, keys)

    def _write_sysctls_here(self, values):
        write_sysctls_here(self.name, values)

    def __repr__(self):
        return f"<NamespaceSession {self.name}{' (ours)' if self.owned else ''}>"


class _Ethtool(IoctlEthtool):
    """pyroute2's ioctl ethtool, reading the feature names once per process.

    ETH_SS_FEATURES is one kernel table (netdev_features_strings) for every device, and decoding
    it in Python is most of what a features read costs.
    """

    _feature_names = None

    def get_stringset(self, set_id=ETH_SS_FEATURES, *args, **kwargs):
        if set_id != ETH_SS_FEATURES or args or kwargs:
            return super().get_stringset(set_id, *args, **kwargs)
        if _Ethtool._feature_names is None:
            _Ethtool._feature_names = tuple(super().get_stringset(set_id))
        return list(_Ethtool._feature_names)


# The model's rules again, right where the path is built and the file written (defence in depth): _SYSCTL_KEY,
# _SYSCTL_VALUE_REFUSED (imported at the top).


def _sysctl_path(name):
    """The /proc/sys file of a dotted net.* name; a name that could point anywhere else is refused."""
    if not isinstance(name, str) or len(name) > 200 or not _SYSCTL_KEY.fullmatch(name):
        raise ValueError(f"sysctl name: expected dotted 'net.…' (letters, digits, '_', '-'), got {name!r}")
    return "/proc/sys/" + name.replace(".", "/")


def check_sysctls(values):
    """Refuse a name or value that could escape /proc/sys/net or write two values, before any namespace is entered."""
    for key, value in values.items():
        _sysctl_path(key)
        if not isinstance(value, str) or _SYSCTL_VALUE_REFUSED.search(value):
            raise ValueError(f"sysctl {key}: expected one line of text without control characters, got {value!r}")


def write_sysctls_here(namespace, values):
    """Write sysctls as the calling thread's namespace sees them; LabError names the one refused."""
    check_sysctls(values)
    for key, value in values.items():
        try:
            with open(_sysctl_path(key), "w") as f:
                f.write(value)
        except OSError as exc:
            raise LabError(f"sysctl {key} = {value!r} refused in namespace {namespace}: {exc.strerror or exc}") from exc


def read_sysctls_here(keys):
    """{key: text} of sysctls as the calling thread's namespace sees them; a missing one reads as None."""
    result = {}
    for key in keys:
        try:
            with open(_sysctl_path(key)) as f:
                result[key] = " ".join(f.read().split())
        except OSError:
            result[key] = None
    return result


def close_sessions(sessions):
    """Close several sessions at once (their threads end side by side); raise the first error after all are closed."""
    for session in sessions:
        session._stop()
    failure = None
    for session in sessions:
        try:
            session._remove()
        except BaseException as exc:
            failure = failure or exc
    for session in sessions:
        # Once back home (or ended), the thread holds the namespace no longer: the kernel may free it.
        interrupts.result(session._released)
    if failure is not None:
        raise failure


class _Worker:
    """A thread serving one session at a time, recycled: starting one per session costs too much under load.

    Between sessions it waits outside any lab namespace (so a removed one is freed): in the
    process's own network namespace, or, where entering that is refused (rootless: the host's
    namespace belongs to the initial user namespace), in a private empty one made for waiting.
    One that can do neither ends instead of being reused.
    """

    _idle: list = []
    _idle_lock = threading.Lock()
    _home = None  # fd of the namespace idle workers wait in
    _MAX_IDLE = 16

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, daemon=True, name="tcpnet-session")
        self.thread.start()

    @classmethod
    def take(cls):
        """An idle worker, or a new one."""
        with cls._idle_lock:
            if cls._home is None:
                cls._home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            if cls._idle:
                return cls._idle.pop()
        return cls()

    def submit(self, function, *args):
        """Run function(*args) in the worker's thread; a concurrent.futures.Future of its result."""
        future = concurrent.futures.Future()
        self._queue.put((future, function, args))
        return future

    def release(self):
        """Send the worker home after the work queued so far; a future that completes once it is home or ended."""
        return self.submit(self._go_home)

    def _go_home(self):
        if not self._leave_namespace():
            self._queue.put(None)  # stranded in the namespace: end, so it is freed
            return
        with self._idle_lock:
            if len(self._idle) >= self._MAX_IDLE:
                self._idle.pop(0)._queue.put(None)  # the longest idle one ends
            self._idle.append(self)

    @classmethod
    def _leave_namespace(cls):
        """In the worker's thread: move to the waiting namespace (see the class); False if impossible."""
        if _libc.setns(cls._home, _CLONE_NEWNET) == 0:
            return True
        with cls._idle_lock:
            if _libc.setns(cls._home, _CLONE_NEWNET) == 0:  # another worker made the private one meanwhile
                return True
            if _libc.unshare(_CLONE_NEWNET) != 0:
                return False
            os.close(cls._home)
            cls._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            return True

    def _serve(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, function, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args))
            except BaseException as exc:
                future.set_exception(exc)


def _register(session):
    with _sessions_lock:
        _sessions[session.name] = session


def _unregister(session):
    with _sessions_lock:
        if _sessions.get(session.name) is session:
            del _sessions[session.name]


def _forget_sessions_in_child():
    # A forked child has none of the parent's session threads: it must not queue work to them.
    _sessions.clear()
    _Worker._idle.clear()
    _Worker._idle_lock = threading.Lock()  # a parent's thread may have held it at the fork


os.register_at_fork(after_in_child=_forget_sessions_in_child)


def session_for(name):
    """The open session of namespace `name` in this process, or None."""
    return _sessions.get(name)
