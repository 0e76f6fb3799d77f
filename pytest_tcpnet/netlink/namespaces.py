"""Named network namespaces: create, enter from a thread, remove, sweep what dead owners left."""

import ctypes
import errno
import os
import signal
import threading

from pyroute2 import netns as _netns

from ..errors import LabError

__all__ = [
    "NETNS_DIR", "PREFIX", "create_namespace", "remove_namespace", "namespace_path", "run_in_namespace",
    "owner_tag", "lab_namespaces", "sweep_stale_namespaces", "pids_in_namespace", "write_sysctls",
    "read_sysctls", "sysctl_exists", "with_iproute", "call_in_own_thread",
]

NETNS_DIR = "/var/run/netns"
#: Every namespace the plugin creates starts with this, so the sweeper never touches anyone else's.
PREFIX = "tcpnet-"


def _process_start_ticks(pid):
    """Start time of a process in clock ticks (field 22 of /proc/PID/stat), to tell a reused pid apart."""
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[19])


def owner_tag(pid=None):
    """'PID.START': identifies the owning process across pid reuse; goes into every namespace name."""
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{_process_start_ticks(pid)}"


def namespace_path(name):
    """The bind-mount path of a named namespace (what nsenter --net= and setns take)."""
    return os.path.join(NETNS_DIR, name)


def create_namespace(name):
    """Create a named network namespace (like `ip netns add`); fail if the name exists."""
    if os.path.exists(namespace_path(name)):
        raise LabError(f"network namespace {name!r} already exists")
    try:
        _netns.create(name)
    except OSError as exc:
        raise LabError(f"cannot create network namespace {name!r}: {exc}") from exc


def remove_namespace(name):
    """Remove a named namespace; a namespace already gone is not an error."""
    try:
        _netns.remove(name)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if exc.errno not in (errno.ENOENT, errno.EINVAL):
            raise


def call_in_own_thread(enter_namespace, function, *args, name="tcpnet-netns"):
    """Run enter_namespace() then function(*args) in a fresh thread; return the result, re-raise its error.

    setns()/unshare(CLONE_NEWNET) change only the calling thread, so the caller's own
    sockets and /proc/sys view stay in the namespace they were in.
    """
    outcome = {}

    def body():
        try:
            enter_namespace()
            outcome["value"] = function(*args)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def run_in_namespace(name, function, *args):
    """Call function(*args) in a short-lived thread that has entered the named namespace."""

    def enter():
        fd = os.open(namespace_path(name), os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)

    return call_in_own_thread(enter, function, *args, name=f"tcpnet-in-{name}")


def with_iproute(name, function):
    """Call function(ipr) with an IPRoute socket opened inside namespace `name`.

    Opening it from a thread that entered the namespace costs ~2 ms; IPRoute(netns=...)
    forks a helper process for the same socket (~9 ms here, far more in a slow VM).
    """
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


# The model's rules again, right where the path is built and the file written (defence in depth).
from ..model.specs import _CONTROL_CHARACTERS as _SYSCTL_VALUE_REFUSED, _SYSCTL_NAME as _SYSCTL_KEY  # noqa: E402


def _sysctl_path(name):
    """The /proc/sys file of a dotted net.* name; a name that could point anywhere else is refused."""
    if not isinstance(name, str) or len(name) > 200 or not _SYSCTL_KEY.fullmatch(name):
        raise ValueError(f"sysctl name: expected dotted 'net.…' (letters, digits, '_', '-'), got {name!r}")
    return "/proc/sys/" + name.replace(".", "/")


def _sysctl_text(key, value):
    """The text written for one sysctl: one line, so the kernel cannot take a second value from it."""
    if not isinstance(value, str) or _SYSCTL_VALUE_REFUSED.search(value):
        raise ValueError(f"sysctl {key}: expected one line of text without control characters, got {value!r}")
    return value


def sysctl_exists(name):
    """True if this kernel has the sysctl (checked in the caller's namespace, read-only)."""
    return os.path.exists(_sysctl_path(name))


def write_sysctls(name, values):
    """Write sysctls inside namespace `name`; raise LabError naming the one the kernel refused."""

    checked = {_sysctl_path(key): (key, _sysctl_text(key, value)) for key, value in values.items()}

    def write_all():
        for path, (key, value) in checked.items():
            try:
                with open(path, "w") as f:
                    f.write(value)
            except OSError as exc:
                raise LabError(f"sysctl {key} = {value!r} refused in namespace {name}: "
                               f"{exc.strerror or exc}") from exc

    run_in_namespace(name, write_all)


def read_sysctls(name, keys):
    """Read sysctls inside namespace `name` as {key: text}; a missing one reads as None."""

    def read_all():
        result = {}
        for key in keys:
            try:
                with open(_sysctl_path(key)) as f:
                    result[key] = " ".join(f.read().split())
            except OSError:
                result[key] = None
        return result

    return run_in_namespace(name, read_all)


def lab_namespaces():
    """Names of every namespace a pytest-tcpnet process created (any owner)."""
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(PREFIX))
    except FileNotFoundError:
        return []


def _owner_alive(tag):
    try:
        pid, ticks = (int(x) for x in tag.split("."))
        return _process_start_ticks(pid) == ticks
    except (ValueError, OSError, IndexError):
        return False


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
    """Remove namespaces whose owner process is dead, first killing what still runs inside them.

    Processes inside a plugin namespace were started by the plugin (nothing else can enter
    it), so ending them is ending our own leftovers. Returns the names removed.
    """
    removed = []
    for name in lab_namespaces():
        tag = name[len(PREFIX):].split("-", 1)[0]
        if _owner_alive(tag):
            continue
        for pid in pids_in_namespace(name):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        remove_namespace(name)
        removed.append(name)
    return removed
