"""The User-Mode Linux backend: the guest kernel runs as ordinary host processes, no KVM and no emulated CPU.

A UML kernel (``linux.uml``) is a Linux kernel built for the ``um`` architecture: its network stack, qdiscs and
TCP are the real ones of its release, and its processes run natively on the host's CPU (each system call
is intercepted), so a guest moves data several times faster than under software emulation (TCG; docs/vm.md,
"Fidelity and cost"). Its root is
the host's filesystem through hostfs, mounted read-only; the directories the session writes to are
mounted read-write over it, as under qemu. It has no network device at all (none is configured).

What differs from a qemu guest, and what follows (docs/vm.md):
- one CPU and HZ=100 (Debian's builds): tests that need two CPUs at once (a CPU-starved receiver beside
  its sender) declare ``tcpnet_needs("smp")`` and run under another backend;
- the guest reaches the host through files, not a virtio port: host calls (tshark, plots, the host's
  CPU load) go through a mailbox directory (hostcall.MailboxServer).

Builds come from Debian's ``user-mode-linux`` packages (dev/setup-uml): the host release's own in
/usr/bin/linux.uml, another release's unpacked under ``/opt/pytest-tcpnet/uml/RELEASE`` with the libc it
needs. ``$TCPNET_UML_DIRS`` (colon-separated roots laid out the same way) adds others.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from .errors import VMUsageError

#: Where dev/setup-uml unpacks UML builds of other Debian releases, one root per kernel release.
UNPACKED_ROOT = "/opt/pytest-tcpnet/uml"
#: The distribution's own build.
SYSTEM_ROOT = "/"
BINARY = "usr/bin/linux.uml"
#: What dev/setup-uml and dev/setup-uml-tt write beside a build they install.
RECORD = "tcpnet-uml.txt"
MODULES = "usr/lib/uml/modules"
SETUP_HINT = "bash dev/setup-uml (Debian's user-mode-linux packages: 6.1 from bookworm, 6.12 from trixie)"
#: The build of --tcpnet-deterministic (time travel), and how to make it.
TIME_TRAVEL_SETUP_HINT = "bash dev/setup-uml-tt (Debian's linux-source-6.12, about 5 minutes)"
_LINE = re.compile(r"^(\d+)\.(\d+)$")


@dataclass(frozen=True)
class UmlBuild:
    """One installed UML kernel: its binary and the modules built with it."""

    binary: str
    release: str  # e.g. 6.1.176: the guest's `uname -r`
    modules: str  # the directory holding modules.dep for this release
    #: Built with time travel (dev/setup-uml-tt): boots with time-travel=inf-cpu, and only when a session asks for it.
    time_travel: bool = False

    @property
    def line(self) -> str:
        """The kernel line (6.1, 6.12) this build belongs to."""
        return kernel_line(self.release)

    @property
    def path(self) -> str:
        """What the session header and accel cache name it by."""
        return self.binary


def kernel_line(release: str) -> str:
    """6.1.0-56-amd64, 6.1.176 -> "6.1"; 6.12.117+deb12-amd64 -> "6.12"."""
    m = re.match(r"^(\d+)\.(\d+)", release)
    if not m:
        raise VMUsageError(f"cannot tell the kernel line of release {release!r}")
    return f"{m.group(1)}.{m.group(2)}"


def is_line(spec: str) -> bool:
    """True for a kernel line such as "6.1" or "6.12" (not a release, not a path)."""
    return bool(_LINE.match(spec or ""))


def _roots() -> list:
    roots = [SYSTEM_ROOT]
    try:
        roots += sorted(str(p) for p in Path(UNPACKED_ROOT).iterdir() if p.is_dir())
    except OSError:
        pass
    roots += [r for r in (os.environ.get("TCPNET_UML_DIRS") or "").split(":") if r]
    return roots


def _build_at(root: str) -> UmlBuild | None:
    binary = os.path.join(root, BINARY)
    modules_base = os.path.join(root, MODULES)
    if not os.access(binary, os.X_OK):
        return None
    try:
        releases = [d for d in os.listdir(modules_base) if os.path.isfile(os.path.join(modules_base, d, "modules.dep"))]
    except OSError:
        return None
    if len(releases) != 1:
        return None  # a build's package ships the modules of exactly one release
    return UmlBuild(binary, releases[0], os.path.join(modules_base, releases[0]), _time_travel(root))


def _time_travel(root: str) -> bool:
    """True where dev/setup-uml-tt's record says the build has time travel."""
    try:
        with open(os.path.join(root, RECORD), encoding="utf-8") as f:
            return "time_travel=yes" in f.read().split()
    except OSError:
        return False


def installed_builds(time_travel: bool = False) -> list:
    """Every usable UML build on this host, oldest release first (one per release): the packaged ones, or with
    time_travel those built for deterministic sessions (never a kernel line's default)."""
    from .kernel import version_key

    found: dict = {}
    for root in _roots():
        build = _build_at(root)
        if build is not None and build.time_travel == time_travel:
            found.setdefault(build.release, build)
    return sorted(found.values(), key=lambda b: version_key(b.release))


def find_build(line: str, builds: list | None = None) -> UmlBuild | None:
    """The newest installed build of kernel line ``line`` ("6.1"), or None."""
    matching = [b for b in (installed_builds() if builds is None else builds) if b.line == line]
    return matching[-1] if matching else None


def require_build(line: str, builds: list | None = None) -> UmlBuild:
    """The build of ``line`` or an error naming what is installed and how to install the rest."""
    builds = installed_builds() if builds is None else builds
    build = find_build(line, builds)
    if build is None:
        have = ", ".join(f"{b.line} ({b.release}, {b.binary})" for b in builds) or "none"
        raise VMUsageError(
            f"--tcpnet-vm-backend=uml: no User-Mode Linux build of kernel line {line} "
            f"(installed: {have}); install it with {SETUP_HINT}"
        )
    return build


def has_module(build: UmlBuild, name: str) -> bool:
    """True if module ``name`` (e.g. sch_netem) is built into or shipped with ``build`` (as kernel.has_module)."""
    from .kernel import has_module as in_modules_dir

    return in_modules_dir(build, name)


# ------------------------------------------------------------------ the guest's PID 1

# The session script runs as PID 1 of the guest, from the host's root (hostfs, read-only). Before the
# runner's body it mounts what a Linux userland expects, the build's modules at /lib/modules, and the
# shared directories read-write; it writes to the host's stdout and stderr through two consoles, and
# powers the guest off at its end (a PID 1 that exits panics the kernel).
PROLOGUE = r"""#!/bin/sh
# pytest-tcpnet's init for a User-Mode Linux guest (vm/uml.py). The kernel runs it as PID 1.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
off() { sync; exec @BUSYBOX@ poweroff -f; }
# busybox's mount, not the host's: that one is set-uid root, and where the guest runs in a user namespace of its
# own (rootless) hostfs shows root's files as the overflow uid, so it would run as nobody and refuse.
mount() { @BUSYBOX@ mount "$@"; }
fail() { echo "tcpnet-init: $*" >&2; echo "tcpnet-init: $*" > /dev/console 2>/dev/null; off; }
# The kernel mounts devtmpfs on /dev itself where it is built with DEVTMPFS_MOUNT (Debian's are).
mount -t proc proc /proc && mount -t sysfs sys /sys && { [ -c /dev/tty1 ] || mount -t devtmpfs dev /dev; } \
  || fail "cannot mount /proc, /sys, /dev"
for d in /tmp /run /var/tmp; do mount -t tmpfs -o mode=1777 tmpfs "$d" || fail "no tmpfs on $d"; done
mkdir -p /dev/pts /dev/shm /run/netns
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
[ -e /dev/fd ] || ln -sf /proc/self/fd /dev/fd
# The build's modules where modprobe looks for them (a mount in the guest only: the host's /lib/modules is untouched).
mount --bind @MODULES_BASE@ /lib/modules || fail "cannot mount the UML modules @MODULES_BASE@ on /lib/modules"
# Code the session imports, read-only, where the tmpfs above covered it (a virtualenv under /tmp).
for path in @CODE@; do
  mkdir -p "$path" 2>/dev/null
  mount -t hostfs -o "ro,$path" hostfs "$path" || fail "cannot mount code directory $path"
done
# Shared directories: read-write (the host reads what the guest writes).
for path in @SHARES@; do
  mkdir -p "$path" 2>/dev/null
  mount -t hostfs -o "$path" hostfs "$path" || fail "cannot mount share $path"
done
ip link set lo up 2>/dev/null
# tty1 is the host's stdout, the console its stderr (as a qemu guest's serial console is): raw, so bytes
# pass unchanged (no CR before each LF). UML gives one host descriptor to one line only.
stty -F /dev/tty1 raw -echo 2>/dev/null && stty -F /dev/console raw -echo 2>/dev/null || fail "cannot set the consoles raw"
exec < /dev/null > /dev/tty1 2> /dev/console
"""


def guest_init(body: str, build: UmlBuild, shares: list, code: list, busybox: str) -> str:
    """The whole PID-1 script: mounts, then the runner's body in a subshell, then power-off."""
    q = shlex.quote
    text = (
        PROLOGUE.replace("@BUSYBOX@", q(busybox))
        .replace("@MODULES_BASE@", q(os.path.dirname(build.modules)))
        .replace("@SHARES@", " ".join(q(s) for s in shares) or "")
        .replace("@CODE@", " ".join(q(c) for c in code) or "")
    )
    # A subshell: the body's `exit` ends it, not PID 1.
    return text + "(\n" + body + ")\noff\n"


def command(build: UmlBuild, memory: str, init: str, uml_dir: str, umid: str, debug: bool = False) -> list:
    """The ``linux.uml`` command line: hostfs root read-only, no network device, consoles on fds 1 and 2."""
    words = [
        build.binary,
        f"mem={memory}",
        "root=/dev/root",
        "rootfstype=hostfs",
        "rootflags=/",
        "ro",
        f"init={init}",
        f"uml_dir={uml_dir}",
        f"umid={umid}",
        # con0 is the kernel's console (boot log, panics) and the session's stderr: the host's stderr;
        # tty1 the session's stdout; no other line, no network device (no eth=/vec=).
        "con=null",
        "con0=null,fd:2",
        "con1=null,fd:1",
        "ssl=null",
    ]
    if build.time_travel:
        # The guest's clock moves only by its own timers: CPU work takes no guest time, and the host's load none.
        words.append("time-travel=inf-cpu")
    if not debug:
        words.append("quiet")
    return words


def memory_for_uml(memory: str) -> str:
    """qemu's memory syntax (2G, 1536M) as UML's mem= takes it (2G, 1536M: the same suffixes)."""
    return memory.upper()
