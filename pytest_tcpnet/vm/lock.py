"""One VM at a time on a host: two emulated guests on a small machine slow each other down severalfold.

The lock is an ``flock`` on a file that nobody else can create, replace or write:
root uses ``/run/pytest-tcpnet/vm.lock`` (``/run`` is writable by root only), other users a
file in their own runtime directory (``$XDG_RUNTIME_DIR``) or, failing that, in their private
cache directory. The directory must be owned by us (or root) and not writable by group or others,
the file is opened with ``O_NOFOLLOW`` and must be a regular file we own with one link, mode 0644
(others may read who holds it, never write). ``TCPNET_VM_LOCK_DIR`` names another directory,
checked the same way. The holder writes its pid, user, start time and
working directory into it, so a waiting session can name it.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path
from typing import Callable

from .cache import private_dir
from .errors import VMError
from .options import DEFAULT_LOCK_TIMEOUT

LOCK_NAME = "vm.lock"
ROOT_LOCK_DIR = "/run/pytest-tcpnet"


class VMBusy(VMError):
    """Another session held the VM lock for longer than we were willing to wait."""


def default_lock_dir() -> Path:
    """Return the directory of the VM lock for this user (see the module docstring)."""
    override = os.environ.get("TCPNET_VM_LOCK_DIR")
    if override:  # checked like any other: ours or root's, not writable by group or others
        return Path(override)
    if os.geteuid() == 0:
        return Path(ROOT_LOCK_DIR)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "pytest-tcpnet"
    return private_dir()


def _check_dir(path: Path) -> None:
    st = os.lstat(path)
    uid = os.geteuid()
    if not stat.S_ISDIR(st.st_mode):
        raise VMError(f"VM lock directory {path} is not a directory (a symlink?); remove it")
    if st.st_uid not in (uid, 0) or st.st_mode & 0o022:
        raise VMError(
            f"VM lock directory {path} must be owned by uid {uid} or root and not writable by "
            f"group or others (it is uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}): "
            "another user could plant the lock there"
        )


def open_lock(directory: Path | None = None) -> int:
    """Create or open the lock file safely and return its descriptor (not yet locked)."""
    directory = Path(directory or default_lock_dir())
    try:
        # 0700: for root this is also the labs' ownership records directory (netlink/ownership.py), which must be.
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise VMError(f"cannot create the VM lock directory {directory}: {err}") from err
    _check_dir(directory)
    path = directory / LOCK_NAME
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise VMError(f"VM lock {path} is a symbolic link: refusing it; remove it") from err
        raise VMError(f"cannot open the VM lock {path}: {err}") from err
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_nlink != 1 or st.st_mode & 0o022:
        os.close(fd)
        raise VMError(
            f"VM lock {path} is not a regular file of ours with one link and mode 0644 "
            f"(uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):o}, {st.st_nlink} links); remove it"
        )
    return fd


def describe_holder(fd: int) -> str:
    """Return who holds the lock, as its holder wrote it ("unknown" if unreadable)."""
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8") or "{}")
    except (OSError, ValueError):
        return "an unknown session"
    if not isinstance(info, dict) or "pid" not in info:
        return "an unknown session"
    since = time.strftime("%H:%M:%S", time.localtime(info.get("since", 0)))
    return f"pid {info.get('pid')} (user {info.get('user')}, since {since}, in {info.get('cwd')})"


class VMLock:
    """Hold the host's VM lock: ``with VMLock(timeout, say): ...``; raises ``VMBusy`` on timeout."""

    def __init__(
        self,
        timeout: float = DEFAULT_LOCK_TIMEOUT,
        say: Callable[[str], None] | None = None,
        directory: Path | None = None,
        poll: float = 0.2,
    ) -> None:
        self.timeout = timeout
        self.say = say or (lambda _msg: None)
        self.directory = directory
        self.poll = poll
        self.fd: int | None = None

    def acquire(self) -> None:
        """Take the lock, waiting up to ``timeout`` seconds and saying who holds it meanwhile."""
        fd = open_lock(self.directory)
        try:
            deadline = time.monotonic() + self.timeout
            announced = False
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    pass
                holder = describe_holder(fd)
                if time.monotonic() >= deadline:
                    raise VMBusy(
                        f"another --tcpnet-vm session holds the VM lock: {holder}; gave up "
                        f"after {self.timeout:g} s (--tcpnet-vm-lock-timeout)"
                    )
                if not announced:
                    self.say(
                        f"waiting for the VM lock held by {holder} "
                        f"(at most {self.timeout:g} s; one VM at a time on this host)"
                    )
                    announced = True
                time.sleep(self.poll)
            info = {"pid": os.getpid(), "user": _user(), "since": time.time(), "cwd": os.getcwd()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd

    def release(self) -> None:
        """Release the lock (the file stays: removing it would race with a waiting session)."""
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)
            except OSError:
                pass
            os.close(self.fd)  # closing drops the flock
            self.fd = None

    def __enter__(self) -> VMLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.geteuid())
