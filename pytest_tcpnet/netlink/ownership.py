"""Proof of what this plugin created: one record per namespace and per process, and a sweeper that trusts only them.

A name prefix proves nothing (``ip netns add tcpnet-mine`` is allowed, and ``ip netns exec``
can start anything in any namespace). So every namespace the plugin creates is recorded in a
root-only state directory *before* it gets its name, with its owner (pid + start time) and its
nsfs identity (inode, device); every process the plugin starts in one is recorded with its
start time. The sweeper removes a namespace only if its record's owner is dead and the mount
still has the recorded inode, and kills only recorded processes whose start time still matches.
Stdlib only: workload code records its processes without importing pyroute2.
"""

import contextlib
import ctypes
import errno
import json
import os
import signal
import stat

from ..errors import LabError

__all__ = [
    "STATE_DIR",
    "NETNS_DIR",
    "process_start_ticks",
    "owner_alive",
    "record_namespace",
    "forget_namespace",
    "record_process",
    "forget_process",
    "namespace_records",
    "unmount_namespace",
    "sweep",
    "recorded_state",
]

#: Root-only directory (0700) holding the records; under /run so a reboot clears it with the namespaces.
STATE_DIR = os.environ.get("TCPNET_STATE_DIR", "/run/pytest-tcpnet")
NETNS_DIR = "/var/run/netns"
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def process_start_ticks(pid):
    """Start time of a process in clock ticks since boot (field 22 of /proc/PID/stat): tells a reused pid apart."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def owner_alive(pid, start):
    """True if process `pid` still runs and is the one that started at `start` ticks."""
    try:
        return process_start_ticks(pid) == start
    except (OSError, ValueError, IndexError):
        return False


def _state_dir():
    """The state directory, created 0700; refuse one that is a symlink, not ours, or writable by others."""
    try:
        os.mkdir(STATE_DIR, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LabError(f"cannot create the ownership records directory {STATE_DIR}: {exc.strerror}") from exc
    st = os.lstat(STATE_DIR)
    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and st.st_mode & 0o077 and not st.st_mode & 0o022:
        # Ours and written by nobody else (an older VM lock made it 0755): tighten it rather than refuse it.
        os.chmod(STATE_DIR, 0o700)
        st = os.lstat(STATE_DIR)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        raise LabError(
            f"{STATE_DIR} must be a directory owned by uid {os.geteuid()} with mode 0700 "
            f"(found mode {stat.filemode(st.st_mode)}, uid {st.st_uid}); refusing to trust it"
        )
    return STATE_DIR


def _write_record(filename, record):
    """Write a record atomically (a crash leaves the old record or the new one, never half of one)."""
    directory = _state_dir()
    path = os.path.join(directory, filename)
    temporary = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, json.dumps(record).encode())
    finally:
        os.close(fd)
    os.replace(temporary, path)


def _remove(filename):
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(STATE_DIR, filename))


def _read(filename):
    try:
        with open(os.path.join(STATE_DIR, filename), "rb") as f:
            return json.loads(f.read())
    except (OSError, ValueError):
        return None


def _owner():
    pid = os.getpid()
    return {"owner_pid": pid, "owner_start": process_start_ticks(pid)}


def record_namespace(name, inode, device):
    """Record that this process is creating namespace `name` with nsfs identity (inode, device)."""
    _write_record(f"{name}.ns", {"name": name, "inode": inode, "device": device, **_owner()})


def forget_namespace(name):
    """Drop the record of a namespace this process removed."""
    _remove(f"{name}.ns")


def record_process(namespace, pid):
    """Record a process this plugin started in one of its namespaces (skipped for namespaces it did not make)."""
    if not os.path.exists(os.path.join(STATE_DIR, f"{namespace}.ns")):
        return
    _write_record(
        f"{namespace}.{pid}.proc", {"namespace": namespace, "pid": pid, "start": process_start_ticks(pid), **_owner()}
    )


def forget_process(namespace, pid):
    """Drop the record of a process once it has been stopped and reaped."""
    _remove(f"{namespace}.{pid}.proc")


def _records(suffix):
    try:
        names = os.listdir(STATE_DIR)
    except FileNotFoundError:
        return []
    found = []
    for filename in sorted(names):
        if filename.endswith(suffix):
            record = _read(filename)
            if isinstance(record, dict):
                found.append((filename, record))
    return found


def namespace_records():
    """{name: record} of every namespace recorded as ours (any owner)."""
    return {r["name"]: r for _, r in _records(".ns") if "name" in r}


def recorded_state():
    """Every namespace/process record file in the state directory (for leak checks; others' files ignored)."""
    try:
        return sorted(n for n in os.listdir(STATE_DIR) if n.endswith((".ns", ".proc", ".tmp")))
    except FileNotFoundError:
        return []


def _namespace_identity(name):
    """(inode, device) of the mounted namespace `name`, or None if nothing is mounted there."""
    try:
        st = os.stat(os.path.join(NETNS_DIR, name))
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_dev


def unmount_namespace(name):
    """Detach the namespace's bind mount and remove its file (what `ip netns del` does, without a fork)."""
    path = os.path.join(NETNS_DIR, name)
    if _libc.umount2(path.encode(), _MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not a mount point (a half-made name)
            raise OSError(err, f"umount {path}: {os.strerror(err)}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _kill_recorded(record):
    """SIGKILL a recorded process (and its process group) only if its start time still matches."""
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 1:
        return False
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False  # gone already
    try:
        # Checked after pinning the pid with a pidfd, so the signal cannot reach a newcomer.
        if not owner_alive(pid, record.get("start")):
            return False
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pid:  # its own group (start_new_session): take its children too
                os.killpg(pid, signal.SIGKILL)
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
        return True
    except ProcessLookupError:
        return False
    finally:
        os.close(pidfd)


def sweep():
    """Remove what dead owners provably left: recorded processes, then recorded namespaces. Returns names removed.

    A namespace is removed only when its record's owner is dead and the mount still has the
    recorded inode; a name that now belongs to something else is left alone (its record dropped).
    """
    removed = []
    dead = set()
    for _filename, record in _records(".ns"):
        if owner_alive(record.get("owner_pid"), record.get("owner_start")):
            continue
        dead.add(record.get("name"))
    for filename, record in _records(".proc"):
        if record.get("namespace") in dead or not owner_alive(record.get("owner_pid"), record.get("owner_start")):
            _kill_recorded(record)
            _remove(filename)
    for filename, record in _records(".ns"):
        name = record.get("name")
        if name not in dead:
            continue
        identity = _namespace_identity(name)
        if identity == (record.get("inode"), record.get("device")):
            unmount_namespace(name)
            removed.append(name)
        elif identity is not None and not os.path.ismount(os.path.join(NETNS_DIR, name)):
            # The owner died between making the name (an empty file) and mounting the namespace on it.
            st = os.lstat(os.path.join(NETNS_DIR, name))
            if stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid == os.geteuid():
                unmount_namespace(name)
                removed.append(name)
        _remove(filename)
    for filename in recorded_state():
        if filename.endswith(".tmp"):
            pid = filename.rsplit(".", 2)[-2]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                _remove(filename)
    return removed
