"""Fast boot: qemu starting the kernel uncompressed (PVH entry), with a tiny init of our own.

virtme-ng boots a full PC (firmware, PCI, ACPI tables for a dozen devices), decompresses the
kernel under emulation, then its init runs udev, which loads modules nobody uses and waits for
them to settle; and it mounts the host's root over 9p without any cache, so every Python import
in the guest is a round trip to the host. Under software emulation that is many seconds to the
first command and as many again for ``import pytest, pyroute2, hypothesis`` (docs/vm.md, "Costs
(measured)").

Here qemu jumps straight into the kernel (no bootloader, no decompression under emulation), the
initramfs loads the few modules that virtio-pci, 9p and the console ports need (no udev), mounts the host's root read-only with
``cache=loose`` (the host's files do not change under a session; the shared directories stay
uncached and read-write), and runs the session script: a few seconds to the first command.

What it needs, each checked with a reason when missing (the runner then boots with vng):
an x86 bzImage whose payload Python can decompress (xz, gzip, bzip2, lzma; zstd with the
``zstandard`` package) and whose kernel has a PVH entry note (CONFIG_PVH); a static busybox;
the modules for virtio-pci, 9p and virtio-console (or built in).
The machine stays q35, as with vng: qemu's microvm boots faster still but has no HPET or ACPI
PM timer, and under a loaded host the guest then failed to calibrate its TSC and hung, or fell
back to a 4 ms jiffies clock, which would quantise every RTT the tests measure.
Derived files (the uncompressed kernel, the initramfs) are cached under ``cache.cache_dir()/vm``.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import os
import platform
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .cache import private_dir, write_atomically
from .kernel import Kernel

# Modules the initramfs loads (with their dependencies, from modules.dep): the PCI transport, the 9p filesystem and its virtio transport, and the console ports.
INITRAMFS_MODULES = ("virtio_pci", "9pnet_virtio", "9p", "virtio_console")
# 9p message size: large reads of Python files in few round trips (the kernel caps it).
MSIZE = 512000
BUSYBOX_NAMES = ("busybox-static", "busybox.static", "busybox")
# Name, type of the ELF note that holds the PVH (32-bit) entry point: Xen's PHYS32_ENTRY.
_PVH_NOTE = (b"Xen", 18)

# The guest's PID 1 until it hands over to the session script. Kernel parameters the kernel
# does not know arrive in its environment: tcpnet_shares (comma-separated host directories,
# exported as 9p tags tcpnet0, tcpnet1, ...), tcpnet_code (comma-separated host directories of
# code the session imports, seen read-only and cached through the root) and tcpnet_script
# (the script to run).
INIT = r"""#!/bin/sh
# pytest-tcpnet's init for --tcpnet-vm (vm/fastboot.py).
export PATH=/bin
fail() { echo "tcpnet-init: $*" >&2; echo "tcpnet-init: $*" > /dev/console; sync; poweroff -f; }
mount -t proc proc /proc && mount -t sysfs sys /sys && mount -t devtmpfs dev /dev \
  || fail "cannot mount /proc, /sys, /dev"
while read -r m; do insmod "/modules/$m" || fail "cannot load module $m"; done < /modules/order
opts=trans=virtio,version=9p2000.L,msize=@MSIZE@,access=any
# The host's root, read-only and cached: nothing changes it during a session.
mount -t 9p -o "ro,cache=loose,$opts" root /newroot || fail "cannot mount the host's root over 9p"
# Code the session imports (its virtualenv, this package) may lie under /tmp or a share: keep a
# view of it through the cached root before tmpfs and the uncached shares cover it.
i=0
for path in $(echo "$tcpnet_code" | tr , ' '); do
  mkdir -p "/code$i" && mount --bind "/newroot$path" "/code$i" || fail "cannot reach code directory $path"
  i=$((i + 1))
done
mount --move /dev /newroot/dev && mount --move /proc /newroot/proc && mount --move /sys /newroot/sys \
  || fail "cannot move /dev, /proc, /sys"
for d in /tmp /run /var/tmp; do mount -t tmpfs -o mode=1777 tmpfs "/newroot$d" || fail "no tmpfs on $d"; done
mkdir -p /newroot/dev/pts /newroot/dev/shm /newroot/run/netns
mount -t devpts -o newinstance,ptmxmode=0666 devpts /newroot/dev/pts
mount -t tmpfs -o mode=1777 tmpfs /newroot/dev/shm
ln -sf /proc/self/fd /newroot/dev/fd
ln -sf /proc/self/fd/0 /newroot/dev/stdin
ln -sf /proc/self/fd/1 /newroot/dev/stdout
ln -sf /proc/self/fd/2 /newroot/dev/stderr
# Shared directories: read-write, uncached (the host reads what the guest writes).
i=0
for path in $(echo "$tcpnet_shares" | tr , ' '); do
  mkdir -p "/newroot$path" 2>/dev/null
  mount -t 9p -o "$opts" "tcpnet$i" "/newroot$path" || fail "cannot mount share $path"
  i=$((i + 1))
done
i=0
for path in $(echo "$tcpnet_code" | tr , ' '); do
  mkdir -p "/newroot$path" 2>/dev/null
  mount --move "/code$i" "/newroot$path" || fail "cannot mount code directory $path"
  i=$((i + 1))
done
# The console ports appear once qemu has announced them (a few ms after virtio_console loads).
ports=/newroot/sys/class/virtio-ports
n=0
until [ -e $ports/vport0p1/name ] && [ -e $ports/vport0p2/name ]; do
  n=$((n + 1)); [ "$n" -lt 600 ] || fail "no virtio console ports in $ports"; sleep 0.05
done
for p in $ports/*; do
  case "$(cat "$p/name")" in
    tcpnet.stdout) out="/newroot/dev/${p##*/}" ;;
    tcpnet.stderr) err="/newroot/dev/${p##*/}" ;;
  esac
done
[ -n "$out" ] && [ -n "$err" ] || fail "console ports not named tcpnet.stdout/tcpnet.stderr"
[ -r "/newroot$tcpnet_script" ] || fail "no session script $tcpnet_script"
# The session script is PID 1 from here on and powers off with this at its end.
mkdir -p /newroot/run/tcpnet && cp /bin/busybox /newroot/run/tcpnet/busybox || fail "cannot copy busybox to /run"
exec switch_root /newroot /bin/sh "$tcpnet_script" < /newroot/dev/null > "$out" 2> "$err"
""".replace("@MSIZE@", str(MSIZE))

# Appended to the session script: the script is PID 1, so it powers the machine off itself.
EPILOGUE = "sync\nexec /run/tcpnet/busybox poweroff -f\n"
# Prepended: what virtme-ng's init would have done that the session relies on.
PROLOGUE = (
    "unset tcpnet_shares tcpnet_code tcpnet_script\n"
    "export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n"
    "ip link set lo up 2>/dev/null\n"
)


class Unavailable(Exception):
    """Fast boot cannot be used on this machine; ``str(err)`` says why."""


@dataclass(frozen=True)
class FastBoot:
    """The derived files a fast boot needs."""

    vmlinux: str
    initramfs: str


# ------------------------------------------------------------------ the kernel image


def bzimage_payload(data: bytes) -> bytes:
    """Return the compressed kernel inside an x86 bzImage (boot protocol 2.08 or later)."""
    if len(data) < 0x250 or data[0x202:0x206] != b"HdrS":
        raise Unavailable("not an x86 bzImage (no HdrS header)")
    (version,) = struct.unpack_from("<H", data, 0x206)
    if version < 0x208:
        raise Unavailable(f"boot protocol {version >> 8}.{version & 0xFF} is older than 2.08")
    setup_sects = data[0x1F1] or 4
    offset, length = struct.unpack_from("<II", data, 0x248)
    start = (setup_sects + 1) * 512 + offset
    payload = data[start : start + length]
    if len(payload) != length or not length:
        raise Unavailable("bzImage payload lies outside the file")
    return payload


def decompress(payload: bytes) -> bytes:
    """Decompress a kernel payload by its magic number; raise ``Unavailable`` for other formats."""
    if payload.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMADecompressor(lzma.FORMAT_XZ).decompress(payload)
    if payload.startswith(b"\x1f\x8b"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(payload)
    if payload.startswith(b"BZh"):
        return bz2.BZ2Decompressor().decompress(payload)
    if payload.startswith(b"\x5d\x00\x00"):
        return lzma.LZMADecompressor(lzma.FORMAT_ALONE).decompress(payload)
    if payload.startswith(b"\x28\xb5\x2f\xfd"):
        try:
            import zstandard  # optional: Python's standard library has no zstd before 3.14
        except ImportError:
            raise Unavailable("the kernel is zstd-compressed: pip install zstandard") from None
        return zstandard.ZstdDecompressor().decompressobj().decompress(payload)
    raise Unavailable(f"unknown kernel compression (magic {payload[:4].hex()})")


def elf_notes(elf: bytes):
    """Yield (name, type, descriptor) of the PT_NOTE segments of a 64-bit little-endian ELF."""
    if elf[:4] != b"\x7fELF" or elf[4] != 2 or elf[5] != 1:
        raise Unavailable("the decompressed kernel is not a 64-bit little-endian ELF")
    (phoff,) = struct.unpack_from("<Q", elf, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from("<IIQQQQ", elf, phoff + i * phentsize)
        if p_type != 4:  # PT_NOTE
            continue
        pos, end = p_offset, p_offset + p_filesz
        while pos + 12 <= end:
            namesz, descsz, ntype = struct.unpack_from("<III", elf, pos)
            name = elf[pos + 12 : pos + 12 + namesz].rstrip(b"\0")
            desc_at = pos + 12 + (namesz + 3) // 4 * 4
            yield name, ntype, elf[desc_at : desc_at + descsz]
            pos = desc_at + (descsz + 3) // 4 * 4


def has_pvh_entry(elf: bytes) -> bool:
    """Return True if the kernel ELF can be started directly by qemu (PVH entry note)."""
    return any((name, ntype) == _PVH_NOTE for name, ntype, _ in elf_notes(elf))


def vmlinux_for(kernel: Kernel, directory: Path | None = None) -> str:
    """Return the uncompressed, PVH-bootable kernel for ``kernel``, extracting it once into the cache."""
    st = os.stat(kernel.path)
    directory = directory or private_dir("vm")
    path = directory / f"vmlinux-{kernel.release}-{st.st_size}-{st.st_mtime_ns}"
    if path.is_file():
        return str(path)
    with open(kernel.path, "rb") as f:
        elf = decompress(bzimage_payload(f.read()))
    if not has_pvh_entry(elf):
        raise Unavailable(f"kernel {kernel.release} has no PVH entry point (CONFIG_PVH)")
    for old in directory.glob(f"vmlinux-{kernel.release}-*"):
        old.unlink(missing_ok=True)  # an older build of the same release
    write_atomically(path, elf)
    return str(path)


# ------------------------------------------------------------------ the initramfs


def module_order(modules_dir: str, wanted=INITRAMFS_MODULES) -> list:
    """Return the .ko paths (relative to ``modules_dir``) to insmod, dependencies first."""
    deps, builtin = {}, set()
    with open(os.path.join(modules_dir, "modules.dep"), encoding="utf-8") as f:
        for line in f:
            mod, _, rest = line.partition(":")
            deps[mod.strip()] = rest.split()
    try:
        with open(os.path.join(modules_dir, "modules.builtin"), encoding="utf-8") as f:
            builtin = {os.path.basename(ln.strip()) for ln in f}
    except OSError:
        pass
    by_name = {_module_name(p): p for p in deps}
    order: list = []

    def add(path: str) -> None:
        if path in order:
            return
        # modules.dep lists a module's dependencies so that the last one loads first.
        for dep in reversed(deps.get(path, [])):
            add(dep)
        order.append(path)

    for name in wanted:
        if name in by_name:
            add(by_name[name])
        elif f"{name}.ko" not in builtin:
            raise Unavailable(f"module {name} is neither built into the kernel nor in {modules_dir}")
    return order


def _module_name(path: str) -> str:
    base = os.path.basename(path)
    return base.split(".ko", 1)[0]


def find_busybox() -> str:
    """Return a statically linked busybox (the initramfs has no libraries)."""
    for directory in os.environ.get("PATH", "").split(os.pathsep) + ["/bin", "/usr/bin", "/sbin"]:
        for name in BUSYBOX_NAMES:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and os.access(path, os.X_OK) and is_static(path):
                return path
    raise Unavailable("no statically linked busybox: apt-get install busybox-static")


def is_static(path: str) -> bool:
    """Return True for an ELF executable without a program interpreter (statically linked)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head[:4] != b"\x7fELF" or head[4] != 2:
        return False
    (phoff,) = struct.unpack_from("<Q", head, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", head, 0x36)
    types = [
        struct.unpack_from("<I", head, phoff + i * phentsize)[0]
        for i in range(phnum)
        if phoff + (i + 1) * phentsize <= len(head)
    ]
    return 3 not in types  # PT_INTERP


def _read_module(path: str) -> bytes:
    """Return a module's bytes; compressed modules are decompressed (busybox insmod takes plain .ko)."""
    with open(path, "rb") as f:
        data = f.read()
    if path.endswith(".xz"):
        return lzma.decompress(data)
    if path.endswith(".gz"):
        return gzip.decompress(data)
    if path.endswith(".zst"):
        try:
            import zstandard
        except ImportError:
            raise Unavailable(f"{path} is zstd-compressed: pip install zstandard") from None
        return zstandard.ZstdDecompressor().decompressobj().decompress(data)
    return data


def build_initramfs(busybox: str, modules: list[tuple[str, bytes]]) -> bytes:
    """Return a newc cpio archive: busybox, the modules in load order, and ``INIT``."""
    from virtme.cpiowriter import CpioWriter  # virtme-ng, which --tcpnet-vm needs anyway

    out = io.BytesIO()
    cw = CpioWriter(out)
    for d in ("bin", "dev", "proc", "sys", "newroot", "modules"):
        cw.mkdir(d.encode(), 0o755)
    cw.mkchardev(b"dev/console", (5, 1), mode=0o600)
    cw.mkchardev(b"dev/null", (1, 3), mode=0o666)
    with open(busybox, "rb") as f:
        cw.write_file(b"bin/busybox", body=f, mode=0o755)
    for tool in (
        "sh",
        "mount",
        "insmod",
        "switch_root",
        "mkdir",
        "ln",
        "cat",
        "cp",
        "echo",
        "tr",
        "sleep",
        "sync",
        "poweroff",
    ):
        cw.symlink(b"busybox", f"bin/{tool}".encode())
    names = []
    for name, data in modules:
        cw.write_file(f"modules/{name}".encode(), body=data, mode=0o644)
        names.append(name)
    cw.write_file(b"modules/order", body=("\n".join(names) + "\n").encode(), mode=0o644)
    cw.write_file(b"init", body=INIT.encode(), mode=0o755)
    cw.write_trailer()
    return out.getvalue()


def initramfs_for(kernel: Kernel, directory: Path | None = None) -> str:
    """Return the initramfs for ``kernel``, built once into the cache (keyed by its inputs)."""
    busybox = find_busybox()
    paths = [os.path.join(kernel.modules, p) for p in module_order(kernel.modules)]
    key = hashlib.sha256(INIT.encode())
    for p in [busybox, *paths]:
        st = os.stat(p)
        key.update(f"{p}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    directory = directory or private_dir("vm")
    path = directory / f"initramfs-{kernel.release}-{key.hexdigest()[:16]}.cpio"
    if path.is_file():
        return str(path)
    modules = []
    for p in paths:
        name = _module_name(p) + ".ko"
        modules.append((name, _read_module(p)))
    for old in directory.glob(f"initramfs-{kernel.release}-*.cpio"):
        old.unlink(missing_ok=True)
    write_atomically(path, build_initramfs(busybox, modules))
    return str(path)


# ------------------------------------------------------------------ qemu


def prepare(kernel: Kernel, qemu: str) -> FastBoot:
    """Return the files for a fast boot of ``kernel``, or raise ``Unavailable`` saying why not."""
    if os.environ.get("TCPNET_VM_FASTBOOT") == "0":
        raise Unavailable("disabled by TCPNET_VM_FASTBOOT=0")
    if platform.machine() != "x86_64":
        raise Unavailable(f"only on x86_64, not {platform.machine()}")
    try:
        return FastBoot(vmlinux_for(kernel), initramfs_for(kernel))
    except (OSError, ValueError, EOFError, lzma.LZMAError, zlib.error, ImportError) as err:
        raise Unavailable(f"{type(err).__name__}: {err}") from err


def kernel_cmdline(shares: list, script: str, debug: bool = False, code: Sequence[str] = ()) -> str:
    """Return the kernel command line for a fast boot (paths are plain: see args.check_shareable)."""
    words = [
        "console=ttyS0",
        "panic=-1",
        "rdinit=/init",
        f"tcpnet_shares={','.join(shares)}",
        f"tcpnet_code={','.join(code)}",
        f"tcpnet_script={script}",
    ]
    if not debug:
        words.append("quiet")  # the serial console is slow under emulation; errors still show
    return " ".join(words)


def qemu_command(
    qemu: str,
    boot: FastBoot,
    accel: str,
    cpus: int,
    memory: str,
    shares: list,
    script: str,
    debug: bool = False,
    code: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> list:
    """Return the qemu command line: q35, no network device, host root read-only, shares rw.

    code: directories the session imports from (a virtualenv, this package): the guest sees
    them read-only through the cached root even where a share or its tmpfs covers them.
    extra: more devices (the host-call port: hostcall.Server.qemu_args).
    """
    cmd = [
        qemu,
        "-M",
        f"q35,accel={accel}",
        "-cpu",
        "host" if accel == "kvm" else "max",
        "-smp",
        str(cpus),
        "-m",
        memory,
        "-no-reboot",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        # Kernel console (boot log, panics) and the script's stdout/stderr, as vng wires them.
        "-serial",
        "chardev:console",
        "-chardev",
        "file,id=console,path=/proc/self/fd/2",
        "-device",
        "virtio-serial-pci",
        "-chardev",
        "file,id=out,path=/proc/self/fd/1",
        "-device",
        "virtserialport,chardev=out,name=tcpnet.stdout",
        "-chardev",
        "file,id=err,path=/proc/self/fd/2",
        "-device",
        "virtserialport,chardev=err,name=tcpnet.stderr",
        *extra,
        "-fsdev",
        "local,id=root,path=/,security_model=none,readonly=on,multidevs=remap",
        "-device",
        "virtio-9p-pci,fsdev=root,mount_tag=root",
    ]
    for i, path in enumerate(shares):
        cmd += [
            "-fsdev",
            f"local,id=tcpnet{i},path={path},security_model=none,multidevs=remap",
            "-device",
            f"virtio-9p-pci,fsdev=tcpnet{i},mount_tag=tcpnet{i}",
        ]
    cmd += ["-kernel", boot.vmlinux, "-initrd", boot.initramfs, "-append", kernel_cmdline(shares, script, debug, code)]
    return cmd


def session_script(body: str) -> str:
    """Wrap the runner's guest script so that it can run as PID 1 and power off at the end."""
    # A subshell: the body's `exit` ends it, not PID 1 (whose exit would panic the kernel).
    return "# Runs as PID 1 of a fast-booted guest (vm/fastboot.py).\n" + PROLOGUE + "(\n" + body + ")\n" + EPILOGUE
