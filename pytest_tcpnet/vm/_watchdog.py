"""Run a command and kill its whole process group when the launching process dies.

Usage: python _watchdog.py LIFELINE_FD CLEANUP_DIR|- COMMAND [ARGS...]

With TCPNET_VM_NICE set, the command starts at that nice value (qemu's threads inherit it),
where this process may set it (raising priority needs root); otherwise at the launcher's.

With TCPNET_VM_PRIVATE_ROOT set (a JSON object: "writable", a list of directories, and "status", a file),
the command runs in a mount namespace of its own (inside a user namespace of its own where this process
is not root) in which every mount is read-only but those directories, and a private tmpfs at
TMPDIR holds what the command keeps there (User-Mode Linux's memory file): a User-Mode Linux guest reads
the host's files as this process, so this is what keeps its root read-only from the host's side, as
qemu's read-only 9p export does. The status file says "private read-only root" or why not.

The launcher keeps the write end of a pipe whose read end is LIFELINE_FD. If the launcher
dies without stopping the VM (SIGKILL, a crash), the read end sees EOF and this process
stops its own process group (vng, virtme-run, qemu): an orphaned qemu would otherwise
spin forever on its closed output pipe, and removes CLEANUP_DIR (the launcher's temporary
directory, which it had no chance to remove). Exits with the command's status. Stdlib only.

A command that makes a session of its own (User-Mode Linux calls setsid(): its kernel and every process
of its guest are in a group of their own) is followed there: a SIGTERM this process gets is passed to
that group, which is SIGKILLed if it is not gone within a few seconds; the launcher's death stops it too,
and it gets the nice value's autogroup as well. This process exits only once that group is gone (SIGKILLed
if it outlives the command by a moment), so a launcher that saw it exit may say the VM is stopped.
"""

import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

_orphaned = threading.Event()
_child: "dict[str, int | None]" = {"pid": None}
# After a SIGTERM, how long the command's own group may take to go before it is SIGKILLed: less than the
# launcher's grace (launch.py's 5 s), so the launcher never has to kill this process first.
_CHILD_GRACE_S = 3.5
# After the command exits, how long what is left of its own group (User-Mode Linux's guest processes, killed by the
# kernel as their tracer dies) may take to go before this process SIGKILLs it and exits: the launcher reads this
# process's exit as "the VM is stopped".
_LEFTOVER_GRACE_S = 0.7
_PR_SET_PDEATHSIG = 1

_CLONE_NEWNS, _CLONE_NEWUSER = 0x00020000, 0x10000000
_MS_BIND, _MS_REC, _MS_PRIVATE = 0x1000, 0x4000, 0x40000
_AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
_SYS_MOUNT_SETATTR = {"x86_64": 442, "aarch64": 442}


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _private_read_only_root(writable: list, scratch: str) -> None:
    """In this (forked, single-threaded) process: a mount namespace where only ``writable`` and ``scratch`` can be written."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNS) != 0:
        # Not privileged (no CAP_SYS_ADMIN, root or not): a user namespace of our own, in which we may mount, owns
        # the new mount namespace. Each id maps to itself, so files keep their owners.
        uid, gid = os.getuid(), os.getgid()
        _check(libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS), "unshare(CLONE_NEWUSER|CLONE_NEWNS)")
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    # Nothing mounted from here on reaches the host's namespace.
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
    for d in writable:  # a mount of its own, so it can stay writable under a read-only root
        _check(libc.mount(d.encode(), d.encode(), None, _MS_BIND | _MS_REC, None), f"bind {d}")
    nr = _SYS_MOUNT_SETATTR.get(os.uname().machine)
    if nr is None:
        raise OSError(f"mount_setattr: unknown on {os.uname().machine}")
    for path, attr in [("/", _MountAttr(attr_set=_MOUNT_ATTR_RDONLY))] + [
        (d, _MountAttr(attr_clr=_MOUNT_ATTR_RDONLY)) for d in writable
    ]:
        _check(
            libc.syscall(nr, _AT_FDCWD, path.encode(), _AT_RECURSIVE, ctypes.byref(attr), ctypes.sizeof(attr)),
            f"mount_setattr {path}",
        )
    os.makedirs(scratch, exist_ok=True)
    _check(libc.mount(b"tmpfs", scratch.encode(), b"tmpfs", 0, b"mode=0700"), f"tmpfs on {scratch}")


def _isolate(spec: str):
    """The preexec function for TCPNET_VM_PRIVATE_ROOT, or None."""
    if not spec:
        return None
    settings = json.loads(spec)

    def isolate() -> None:
        try:
            _private_read_only_root(settings["writable"], os.environ["TMPDIR"])
            status = "private read-only root"
        except (OSError, ValueError, KeyError) as exc:
            status = f"the host's files are not write-protected from the guest beyond its own read-only mount ({exc})"
        try:
            with open(settings["status"], "w") as f:
                f.write(status)
        except OSError:
            pass

    return isolate


def _lifeline(fd: int, cleanup: str) -> None:
    try:
        while os.read(fd, 4096):
            pass
    except OSError:
        pass
    _orphaned.set()
    # The launcher is gone: stop vng and qemu, politely first so vng removes its temp files.
    _signal_child_group(signal.SIGTERM)
    os.killpg(0, signal.SIGTERM)
    time.sleep(3)
    _signal_child_group(signal.SIGKILL)
    if cleanup != "-":
        shutil.rmtree(cleanup, ignore_errors=True)
    os.killpg(0, signal.SIGKILL)  # includes this process


def _child_group() -> "int | None":
    """The command's process group where it made one of its own (not ours), else None."""
    pid = _child["pid"]
    if pid is None:
        return None
    try:
        group = os.getpgid(pid)
    except OSError:
        return None
    return group if group != os.getpgid(0) else None


def _signal_child_group(sig: int) -> None:
    group = _child_group()
    if group is not None:
        try:
            os.killpg(group, sig)
        except OSError:
            pass


def _group_gone(group: int, seconds: float) -> bool:
    """Wait up to ``seconds`` for process group ``group`` to have no process left; whether it has none."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False  # someone else's group: not ours to wait for
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def _reap_leftovers(pid: int) -> None:
    """After the command (``pid``) exited: wait for the group it made of its own, if any, to go; SIGKILL what stays."""
    # A group whose id is the command's pid is the one it made with setsid(): the kernel does not hand a pid out
    # again while a group still bears it. A command that made none left no such group (ESRCH at once).
    if _group_gone(pid, _LEFTOVER_GRACE_S):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        return
    _group_gone(pid, _LEFTOVER_GRACE_S)


def _on_sigterm(signum, frame) -> None:
    """Outlive the launcher's SIGTERM to our group; pass it on to a command in a group of its own, then make sure."""
    if _child_group() is None:
        return
    _signal_child_group(signal.SIGTERM)

    def make_sure() -> None:
        time.sleep(_CHILD_GRACE_S)
        _signal_child_group(signal.SIGKILL)

    threading.Thread(target=make_sure, daemon=True).start()


def _follow_autogroup(pid: int, nice: str) -> None:
    """Give the command's own session (once it made one) the nice value's autogroup, as ours has."""
    deadline = time.monotonic() + 5
    mine = os.getsid(0)
    while time.monotonic() < deadline:
        try:
            if os.getsid(pid) != mine:
                with open(f"/proc/{pid}/autogroup", "w") as f:
                    f.write(nice)
                return
        except (OSError, ValueError):
            return
        time.sleep(0.02)


def main() -> int:
    fd, cleanup = int(sys.argv[1]), sys.argv[2]
    # Outlive the launcher's SIGTERM to the group so we can report the command's status.
    # A Python handler (unlike SIG_IGN) is reset by exec, so the command still gets it.
    signal.signal(signal.SIGTERM, _on_sigterm)
    nice = os.environ.pop("TCPNET_VM_NICE", "")
    if nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, int(nice))  # this thread; the command forked from it inherits it
        except (OSError, ValueError):
            pass  # not permitted (no root): the launcher reports the priority the emulator got
        # With autogroups (the default on desktop and most server kernels) each session shares the CPU
        # with every other session equally, whatever its threads' nice: this new session (the launcher
        # made it for us) must carry the priority too, or a CPU hog in another session still takes half.
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(nice)
        except (OSError, ValueError):
            pass  # no autogroups here, or not permitted
    isolate = _isolate(os.environ.pop("TCPNET_VM_PRIVATE_ROOT", ""))

    def prepare() -> None:
        # If this process dies (SIGKILL), the command is killed with it: it may be in a group of its own.
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if isolate is not None:
            isolate()

    proc = subprocess.Popen(sys.argv[3:], preexec_fn=prepare)
    _child["pid"] = proc.pid
    if nice:
        threading.Thread(target=_follow_autogroup, args=(proc.pid, nice), daemon=True).start()
    lifeline = threading.Thread(target=_lifeline, args=(fd, cleanup), daemon=True)
    lifeline.start()
    code = proc.wait()
    _reap_leftovers(proc.pid)
    if _orphaned.is_set():
        lifeline.join()  # finish the SIGKILL sweep for qemu, which may outlive vng
    return code


if __name__ == "__main__":
    sys.exit(main())
