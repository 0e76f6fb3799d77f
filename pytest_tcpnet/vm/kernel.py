"""Choosing the kernel image to boot and checking that its modules are on the host."""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from .errors import VMUsageError

BOOT_DIR = "/boot"
MODULES_DIR = "/lib/modules"
# Where the Debian family ships kernels; the same package also provides the modules.
INSTALL_HINT = "apt-get install linux-image-amd64"

_IMAGE_NAME = re.compile(r"^(?:vmlinuz|vmlinux|bzImage)-(?P<release>.+)$")


@dataclass(frozen=True)
class Kernel:
    """A bootable kernel image and the release its modules are installed under."""

    path: str
    release: str
    modules: str  # /lib/modules/<release>


def release_from_image(path: str | os.PathLike[str]) -> str | None:
    """Read the release from an x86 bzImage header, or None if ``path`` is not a bzImage."""
    # The boot protocol puts "HdrS" at 0x202 and, at 0x20E, the offset (minus 0x200) of a
    # NUL-terminated version string whose first word is the release (`uname -r`).
    try:
        with open(path, "rb") as f:
            head = f.read(0x210)
            if len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
                return None
            (offset,) = struct.unpack_from("<H", head, 0x20E)
            f.seek(offset + 0x200)
            text = f.read(256).split(b"\0", 1)[0].decode("ascii", "replace")
    except OSError:
        return None
    release = text.split(" ", 1)[0]
    return release or None


def release_from_name(path: str | os.PathLike[str]) -> str | None:
    """Return RELEASE from a file named ``vmlinuz-RELEASE`` (or vmlinux-/bzImage-), else None."""
    m = _IMAGE_NAME.match(os.path.basename(os.fspath(path)))
    return m.group("release") if m else None


def version_key(release: str) -> tuple:
    """Sort key that orders releases numerically: 6.10.0 after 6.9.0, -56 after -9."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"[.\-+~_]", release))


def _modules_dir(release: str, modules_dir: str) -> str | None:
    path = os.path.join(modules_dir, release)
    return path if os.path.isdir(path) else None


def default_kernel(boot_dir: str = BOOT_DIR, modules_dir: str = MODULES_DIR, running: str | None = None) -> Kernel:
    """Pick the newest ``boot_dir/vmlinuz-*`` that has modules and is not the running kernel."""
    running = running if running is not None else os.uname().release
    candidates, skipped = [], []
    for image in sorted(Path(boot_dir).glob("vmlinuz-*")):
        release = release_from_name(image)
        if not release:
            continue
        if release == running:
            skipped.append(f"{image} (the running kernel)")
        elif not _modules_dir(release, modules_dir):
            skipped.append(f"{image} (no {modules_dir}/{release})")
        else:
            candidates.append((version_key(release), release, str(image)))
    if not candidates:
        seen = "; ".join(skipped) if skipped else f"no vmlinuz-* in {boot_dir}"
        raise VMUsageError(
            f"no kernel to boot for --tcpnet-vm: {seen}. The VM needs a kernel image in "
            f"{boot_dir} with its modules in {modules_dir}, other than the running kernel "
            f"{running}. Install one ({INSTALL_HINT}) or pass --tcpnet-kernel=PATH|RELEASE."
        )
    _, release, newest = max(candidates)
    return Kernel(newest, release, os.path.join(modules_dir, release))


def resolve_kernel(spec: str | None, boot_dir: str = BOOT_DIR, modules_dir: str = MODULES_DIR) -> Kernel:
    """Turn ``--tcpnet-kernel`` (None, a path or a release) into a checked ``Kernel``."""
    if not spec:
        return default_kernel(boot_dir, modules_dir)
    looks_like_path = os.sep in spec or os.path.exists(spec)
    path = os.path.abspath(spec) if looks_like_path else os.path.join(boot_dir, "vmlinuz-" + spec)
    if not os.path.isfile(path):
        if looks_like_path:
            raise VMUsageError(f"--tcpnet-kernel: kernel image {path} does not exist")
        available = sorted(p.name[len("vmlinuz-") :] for p in Path(boot_dir).glob("vmlinuz-*"))
        raise VMUsageError(
            f"--tcpnet-kernel={spec}: no {path}; releases in {boot_dir}: "
            f"{', '.join(available) or 'none'} (Debian: apt-get install linux-image-{spec})"
        )
    if not os.access(path, os.R_OK):
        raise VMUsageError(f"--tcpnet-kernel: kernel image {path} is not readable by this user")
    release = (None if looks_like_path else spec) or release_from_image(path) or release_from_name(path)
    if not release:
        raise VMUsageError(
            f"--tcpnet-kernel: cannot tell the release of {path} (not an x86 bzImage and "
            "not named vmlinuz-RELEASE), so the VM could not find its modules"
        )
    modules = _modules_dir(release, modules_dir)
    if not modules:
        raise VMUsageError(
            f"kernel {release} ({path}) has no modules in {modules_dir}/{release}; the VM "
            "loads sch_netem & co. from there. Install the package that ships them "
            f"(Debian: apt-get install linux-image-{release})"
        )
    return Kernel(path, release, modules)


def installed_kernels(boot_dir: str = BOOT_DIR, modules_dir: str = MODULES_DIR) -> list:
    """Every ``boot_dir/vmlinuz-*`` with its modules installed, oldest release first."""
    found = []
    for image in Path(boot_dir).glob("vmlinuz-*"):
        release = release_from_name(image)
        if release and _modules_dir(release, modules_dir):
            found.append(Kernel(str(image), release, os.path.join(modules_dir, release)))
    return sorted(found, key=lambda k: version_key(k.release))


def has_module(kernel, name: str) -> bool:
    """Return True if module ``name`` (e.g. "sch_netem") is built in or installed for ``kernel`` (a Kernel, or
    anything whose ``modules`` is a directory with modules.dep: a UML build)."""
    needle = f"/{name}.ko"
    for index in ("modules.builtin", "modules.dep"):
        try:
            with open(os.path.join(kernel.modules, index), encoding="utf-8", errors="replace") as f:
                if needle in f.read():
                    return True
        except OSError:
            continue
    return False
