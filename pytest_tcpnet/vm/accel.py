"""Choosing KVM or software emulation (TCG), with a cached, bounded KVM boot probe."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Callable

from .cache import cache_dir
from .errors import VMUsageError
from .kernel import Kernel

KVM_DEVICE = "/dev/kvm"
# A working KVM guest reaches its first command well within this; a hung one never does (docs/vm.md, "Backends").
DEFAULT_PROBE_TIMEOUT = 25.0
CACHE_NAME = "vm-accel.json"


def cache_path() -> Path:
    """Return the file caching KVM probe results (under $XDG_CACHE_HOME or ~/.cache)."""
    return cache_dir() / CACHE_NAME


def qemu_version(qemu: str) -> str:
    """Return the first line of ``qemu --version`` ("" if it cannot be run)."""
    try:
        out = subprocess.run([qemu, "--version"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.splitlines()[0].strip() if out else ""


def cache_key(kernel: Kernel, qemu_ver: str, host_release: str | None = None, method: str = "vng") -> str:
    """Key a probe result by guest kernel, qemu, host kernel (which provides KVM) and boot method."""
    try:
        st = os.stat(kernel.path)
        image = f"{kernel.path}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        image = kernel.path
    host = host_release if host_release is not None else os.uname().release
    key = f"guest={kernel.release} image={image} qemu={qemu_ver} host={host}"
    # A PVH kernel on microvm and a bzImage on a PC fail under KVM in different ways.
    return key if method == "vng" else f"{key} boot={method}"


def read_cache(key: str, path: Path | None = None) -> dict | None:
    """Return the cached probe result for ``key`` ({"accel", "reason", "when"}) or None."""
    try:
        data = json.loads((path or cache_path()).read_text(encoding="utf-8"))
        entry = data.get(key)
    except (OSError, ValueError, AttributeError):
        return None
    if isinstance(entry, dict) and entry.get("accel") in ("kvm", "tcg"):
        return entry
    return None


def write_cache(key: str, accel: str, reason: str, path: Path | None = None) -> None:
    """Store a probe result; a cache that cannot be written only costs a probe next time."""
    path = path or cache_path()
    try:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
        data[key] = {"accel": accel, "reason": reason, "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


def kvm_usable() -> tuple[bool, str]:
    """Return whether /dev/kvm exists and is read-writable by us, and why not."""
    if not os.path.exists(KVM_DEVICE):
        return False, f"{KVM_DEVICE} does not exist"
    if not os.access(KVM_DEVICE, os.R_OK | os.W_OK):
        return False, f"{KVM_DEVICE} is not read-writable by this user (group kvm?)"
    return True, ""


def choose_accel(
    requested: str,
    kernel: Kernel,
    qemu: str,
    probe: Callable[[float], tuple[bool, str]],
    probe_timeout: float | None = None,
    method: str = "vng",
) -> tuple[str, str]:
    """Return ("kvm" | "tcg", reason); ``probe(timeout)`` boots a trivial guest under KVM."""
    if requested == "tcg":
        return "tcg", "forced by --tcpnet-vm-backend=tcg"
    ok, why_not = kvm_usable()
    if requested == "kvm":
        if not ok:
            raise VMUsageError(f"--tcpnet-vm-backend=kvm but {why_not}; use --tcpnet-vm-backend=uml or tcg")
        return "kvm", "forced by --tcpnet-vm-backend=kvm"
    if requested != "auto":
        raise VMUsageError(f"choose_accel takes auto, kvm or tcg, not {requested!r}")
    if not ok:
        return "tcg", f"auto: {why_not}"
    key = cache_key(kernel, qemu_version(qemu), method=method)
    cached = read_cache(key)
    if cached:
        return cached["accel"], f"auto, cached {cached['when']}: {cached['reason']} ({cache_path()})"
    if probe_timeout is None:
        probe_timeout = float(os.environ.get("TCPNET_VM_KVM_PROBE_TIMEOUT") or DEFAULT_PROBE_TIMEOUT)
    started = time.monotonic()
    worked, detail = probe(probe_timeout)
    took = time.monotonic() - started
    if worked:
        accel, reason = "kvm", f"KVM probe boot reached its command in {took:.1f} s"
    else:
        accel, reason = "tcg", f"KVM probe boot failed ({detail})"
    write_cache(key, accel, reason)
    return accel, f"auto: {reason}; cached in {cache_path()}"
