"""The ``--tcpnet-vm*`` command line options and their environment defaults."""

from __future__ import annotations

import os

#: Options that take no value.
FLAG_OPTIONS = ("--tcpnet-vm", "--tcpnet-deterministic")
#: Options that take a value (``--opt=value`` or ``--opt value``).
VALUE_OPTIONS = (
    "--tcpnet-kernel",
    "--tcpnet-vm-backend",
    "--tcpnet-vm-accel",
    "--tcpnet-vm-cpus",
    "--tcpnet-vm-memory",
    "--tcpnet-vm-boot-timeout",
    "--tcpnet-vm-lock-timeout",
    "--tcpnet-vm-jobs",
)

#: --tcpnet-vm-backend (backend.py): KVM, User-Mode Linux, software emulation, or the best this host has.
BACKEND_CHOICES = ("auto", "kvm", "uml", "tcg")
DEFAULT_CPUS = 2
DEFAULT_MEMORY = "2G"
# Well above what software emulation needs to reach our command, even booting with vng (docs/vm.md, "Costs
# (measured)"): room for a loaded CI host without letting a hung guest block for long.
DEFAULT_BOOT_TIMEOUT = 120.0
# Guests at once when a session runs under several kernels (--tcpnet-vm-jobs).
DEFAULT_JOBS = 1
# A second VM session waits this long for the first (see lock.py) before refusing.
DEFAULT_LOCK_TIMEOUT = 1800.0


def _env(name: str, default: str) -> str:
    """Return environment variable ``name`` if set and non-empty, else ``default``."""
    return os.environ.get(name) or default


def add_options(group) -> None:
    """Register the VM options on a pytest ``OptionGroup`` (the "tcpnet" group)."""
    group.addoption(
        "--tcpnet-vm",
        action="store_true",
        default=False,
        dest="tcpnet_vm",
        help="re-run this pytest session inside a VM (virtme-ng + qemu) booting "
        "--tcpnet-kernel, e.g. to get sch_netem when the host kernel lacks it.",
    )
    group.addoption(
        "--tcpnet-deterministic",
        action="store_true",
        default=os.environ.get("TCPNET_DETERMINISTIC") == "1",
        dest="tcpnet_deterministic",
        help="run the session (as --tcpnet-vm) in a User-Mode Linux guest with time travel, whose clock only its own "
        "timers move, so host load changes nothing it measures, with every netem seeded (--tcpnet-seed, default 0); "
        "needs the build dev/setup-uml-tt makes (docs/vm.md, 'Time travel'). Env: TCPNET_DETERMINISTIC=1",
    )
    group.addoption(
        "--tcpnet-kernel",
        action="append",
        default=None,
        dest="tcpnet_vm_kernel",
        metavar="LINE|PATH|RELEASE|all",
        help="kernel for --tcpnet-vm: a kernel line such as 6.1 or 6.12 (its newest qemu image in /boot, or "
        "its User-Mode Linux build, per backend), a vmlinuz path, or a release such as "
        "6.1.0-56-amd64 (looked up as /boot/vmlinuz-RELEASE; under UML, the build of its line). Default: the "
        "newest kernel in /boot with modules in /lib/modules that is not the running one (without one, the "
        "newest UML build). Give it several times (or 'all': every installed kernel line with sch_netem) to "
        "run the session under each in turn and end with one table of every flow per kernel.",
    )
    group.addoption(
        "--tcpnet-vm-backend",
        "--tcpnet-vm-accel",
        action="store",
        default=_env("TCPNET_VM_BACKEND", _env("TCPNET_VM_ACCEL", "auto")),
        choices=BACKEND_CHOICES,
        dest="tcpnet_vm_backend",
        help="how --tcpnet-vm boots its kernel: kvm, uml (User-Mode Linux: the kernel as host processes, "
        "no KVM needed, near host speed; dev/setup-uml installs 6.1 and 6.12), tcg (software emulation) or "
        "auto: KVM where a probe boot works (cached), else UML where a build of the kernel's line is "
        "installed, else tcg. --tcpnet-vm-accel is the old name. Env: TCPNET_VM_BACKEND (or TCPNET_VM_ACCEL). "
        "Default: %(default)s.",
    )
    group.addoption(
        "--tcpnet-vm-cpus",
        action="store",
        type=int,
        # A string default goes through ``type`` too, so a bad env value is a usage error.
        default=_env("TCPNET_VM_CPUS", str(DEFAULT_CPUS)),
        dest="tcpnet_vm_cpus",
        metavar="N",
        help="virtual CPUs of the VM (env TCPNET_VM_CPUS). Default: %(default)s.",
    )
    group.addoption(
        "--tcpnet-vm-memory",
        action="store",
        default=_env("TCPNET_VM_MEMORY", DEFAULT_MEMORY),
        dest="tcpnet_vm_memory",
        metavar="SIZE",
        help="memory of the VM, qemu syntax such as 2G or 1536M (env TCPNET_VM_MEMORY). Default: %(default)s.",
    )
    group.addoption(
        "--tcpnet-vm-boot-timeout",
        action="store",
        type=float,
        default=_env("TCPNET_VM_BOOT_TIMEOUT", str(DEFAULT_BOOT_TIMEOUT)),
        dest="tcpnet_vm_boot_timeout",
        metavar="SECONDS",
        help="seconds the guest may take to start the session before the VM is "
        "killed (env TCPNET_VM_BOOT_TIMEOUT); the session itself is not limited. "
        "Default: %(default)s.",
    )
    group.addoption(
        "--tcpnet-vm-lock-timeout",
        action="store",
        type=float,
        default=_env("TCPNET_VM_LOCK_TIMEOUT", str(DEFAULT_LOCK_TIMEOUT)),
        dest="tcpnet_vm_lock_timeout",
        metavar="SECONDS",
        help="one --tcpnet-vm session at a time per host: how long to wait for another "
        "session's VM before refusing (env TCPNET_VM_LOCK_TIMEOUT; 0: do not wait). "
        "Default: %(default)s.",
    )
    group.addoption(
        "--tcpnet-vm-jobs",
        action="store",
        type=int,
        default=_env("TCPNET_VM_JOBS", str(DEFAULT_JOBS)),
        dest="tcpnet_vm_jobs",
        metavar="N",
        help="with several --tcpnet-kernel, run up to N guests at once, side by side (env TCPNET_VM_JOBS). A "
        "User-Mode Linux guest keeps one host CPU busy, a qemu guest --tcpnet-vm-cpus: more guests than CPUs "
        "slow each other and their measurements. The first kernel's output comes live, the others' in turn. "
        "Default: %(default)s (one after the other).",
    )
