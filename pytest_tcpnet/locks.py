"""Machine-wide lock files nobody else can plant, swap or write: a verified private directory, no links followed.

Root sessions share ``/run/lock/pytest-tcpnet`` (created 0700, owned by root). Sessions of
an unprivileged user (rootless labs included) use a directory of their own:
``$XDG_RUNTIME_DIR/pytest-tcpnet`` or ``/tmp/pytest-tcpnet-UID``. ``$TCPNET_LOCK_DIR``
overrides the place; whatever the place, it is refused unless it is a real directory
(not a symlink) owned by this user and writable by nobody else.
"""

import os
import re
import stat
import tempfile

from .errors import LabError

__all__ = ["LOCK_DIR_ENV", "lock_directory", "open_lock_file", "real_uid", "in_user_namespace"]

#: Environment variable naming another lock directory (it is verified like the default one).
LOCK_DIR_ENV = "TCPNET_LOCK_DIR"
_LOCK_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}$")
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_NO_OTHER_WRITERS = stat.S_IWGRP | stat.S_IWOTH


def _uid_map():
    try:
        with open("/proc/self/uid_map") as f:
            return [tuple(int(x) for x in line.split()) for line in f if line.strip()]
    except (OSError, ValueError):
        return [(0, 0, 4294967295)]


def in_user_namespace():
    """True when this process runs in a user namespace other than the initial one (e.g. rootless labs)."""
    return _uid_map() != [(0, 0, 4294967295)]


#: Set by a rootless session for the sessions it starts: a nested user namespace's map only reaches its parent.
REAL_UID_ENV = "TCPNET_REAL_UID"


def real_uid():
    """This process's uid as the initial user namespace sees it (the user who started the session)."""
    inherited = os.environ.get(REAL_UID_ENV, "")
    if inherited.isdigit() and in_user_namespace():
        return int(inherited)
    uid = os.geteuid()
    for inside, outside, count in _uid_map():
        if inside <= uid < inside + count:
            return outside + uid - inside
    return uid


def lock_directory():
    """The verified directory of the lock files (created 0700 on first use); LabError if it is not safe."""
    path = _chosen_directory()
    os.close(_open_directory(path))
    return path


def open_lock_file(name):
    """Open (creating 0600) the lock file `name` in lock_directory(); return the fd (O_CLOEXEC) to flock.

    Links are never followed, and a file that is not a regular file of ours with a single
    link is refused: nothing planted can make us open or truncate another file.
    """
    if not isinstance(name, str) or not _LOCK_NAME.match(name) or name in (".", ".."):
        raise ValueError(f"lock name: expected a plain file name ([A-Za-z0-9_.-], no '/'), got {name!r}")
    directory = _chosen_directory()
    dir_fd = _open_directory(directory)
    try:
        try:
            fd = os.open(name, _FILE_FLAGS, 0o600, dir_fd=dir_fd)
        except OSError as exc:
            raise LabError(
                f"lock file {os.path.join(directory, name)}: cannot open it safely "
                f"({exc.strerror}); a symlink there is refused"
            ) from exc
    finally:
        os.close(dir_fd)
    info = os.fstat(fd)
    problem = _file_problem(info)
    if problem:
        os.close(fd)
        raise LabError(f"lock file {os.path.join(directory, name)} refused: {problem}")
    return fd


def _chosen_directory():
    override = os.environ.get(LOCK_DIR_ENV)
    if override:
        return os.path.abspath(override)
    if os.geteuid() == 0 and not in_user_namespace():
        parent = next((p for p in ("/run/lock", "/run") if os.path.isdir(p)), tempfile.gettempdir())
        return os.path.join(parent, "pytest-tcpnet")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and _is_private_directory(runtime):
        return os.path.join(runtime, "pytest-tcpnet")
    return os.path.join(tempfile.gettempdir(), f"pytest-tcpnet-{real_uid()}")


def _is_private_directory(path):
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & _NO_OTHER_WRITERS


def _open_directory(path):
    """Create the directory if needed, open it without following links and verify the open fd."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise LabError(f"lock directory {path}: cannot create it ({exc.strerror})") from exc
    try:
        fd = os.open(path, _DIRECTORY_FLAGS)
    except OSError as exc:
        raise LabError(
            f"lock directory {path}: cannot open it safely ({exc.strerror}); it must be a real directory, not a symlink"
        ) from exc
    problem = _directory_problem(os.fstat(fd), path)
    if problem:
        os.close(fd)
        raise LabError(f"lock directory {path} refused: {problem}; remove it (or set ${LOCK_DIR_ENV})")
    return fd


def _directory_problem(info, path):
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
    if info.st_mode & _NO_OTHER_WRITERS:
        return f"writable by others (mode {stat.S_IMODE(info.st_mode):04o})"
    parent = os.path.dirname(path.rstrip("/")) or "/"
    pinfo = os.stat(parent)
    if pinfo.st_uid not in (0, os.geteuid(), *_unmapped_owner()):
        return f"its parent {parent} belongs to uid {pinfo.st_uid}, who could swap it"
    # Someone who may write the parent could rename our directory away and put theirs in its place,
    # unless the sticky bit (as on /tmp and /run/lock) reserves that to the owner.
    if pinfo.st_mode & _NO_OTHER_WRITERS and not pinfo.st_mode & stat.S_ISVTX:
        return f"its parent {parent} is writable by others without the sticky bit"
    return None


def _unmapped_owner():
    """In a user namespace, owners outside the map (root of the real /tmp among them) read as the overflow uid."""
    if not in_user_namespace():
        return ()
    try:
        with open("/proc/sys/kernel/overflowuid") as f:
            return (int(f.read()),)
    except (OSError, ValueError):
        return (65534,)


def _file_problem(info):
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != os.geteuid():
        return f"owned by uid {info.st_uid}, not by this user"
    if info.st_nlink != 1:
        return f"it has {info.st_nlink} hard links (a planted link to another file?)"
    if info.st_mode & _NO_OTHER_WRITERS:
        return f"writable by others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None
