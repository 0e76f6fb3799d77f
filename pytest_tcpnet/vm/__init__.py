"""Run a pytest session inside a VM that boots a chosen kernel (virtme-ng).

Interface used by ``plugin.py`` (the only pytest-aware caller):

- ``add_options(group)``: register the ``--tcpnet-vm*`` options on a pytest option group.
- ``maybe_run_in_vm(config) -> int | None``: when ``--tcpnet-vm`` is set and we are not
  already inside the VM, re-run the invocation in a VM and return its exit code;
  otherwise return None.
- ``inside_vm() -> bool``: True in a session started by ``maybe_run_in_vm``.

Importing this package is cheap: the runner (subprocess, selectors, ...) is imported
only when a VM is actually started, and virtme-ng is only ever run as the ``vng``
executable.
"""

from __future__ import annotations

import os

from .options import add_options

__all__ = ["add_options", "maybe_run_in_vm", "inside_vm", "software_emulated", "use_host_for_analysis", "IN_VM_ENV",
           "ACCEL_ENV"]

#: Set to "1" in the guest's environment; also what stops the guest from recursing.
IN_VM_ENV = "TCPNET_IN_VM"
#: "1" in the guest's environment when the runner serves host calls (hostcall.py); "0" on the host turns them off.
HOSTCALL_ENV = "TCPNET_VM_HOSTCALL"
#: The guest's accelerator ("kvm" or "tcg"), in the guest's environment.
ACCEL_ENV = "TCPNET_VM_ACCEL"


def inside_vm() -> bool:
    """Return True when this process runs in a session started by ``maybe_run_in_vm``."""
    return os.environ.get(IN_VM_ENV) == "1"


def software_emulated() -> bool:
    """True in a --tcpnet-vm guest under software emulation (TCG): its CPU is ~15x slower and shared.

    Timing-sensitive tests may then need a coarser operating point: endpoints there add
    milliseconds per round trip (more when the host is busy), which a fast path cannot hide.
    """
    return inside_vm() and os.environ.get(ACCEL_ENV) == "tcg"


def use_host_for_analysis() -> bool:
    """In a guest whose runner offers it, decode pcaps and draw plots on the host (see hostcall)."""
    if not inside_vm() or os.environ.get(HOSTCALL_ENV) != "1":
        return False
    from .hostcall import use_host_for_analysis as use

    return use()


def maybe_run_in_vm(config) -> "int | None":
    """Re-run the session in a VM if ``--tcpnet-vm`` asks for it; return its exit code or None."""
    if not config.getoption("tcpnet_vm", default=False) or inside_vm():
        return None
    from .runner import run_config_in_vm  # deferred: only VM sessions pay for it

    return run_config_in_vm(config)
