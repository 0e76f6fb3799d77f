"""Run a pytest session inside a VM that boots a chosen kernel: qemu (KVM or TCG) or User-Mode Linux.

Interface used by ``plugin.py`` (the only pytest-aware caller):

- ``add_options(group)``: register the ``--tcpnet-vm*`` options on a pytest option group.
- ``maybe_run_in_vm(config) -> int | None``: when ``--tcpnet-vm`` is set and we are not
  already inside the VM, re-run the invocation in a VM and return its exit code;
  otherwise return None.
- ``inside_vm() -> bool``: True in a session started by ``maybe_run_in_vm``.

Importing this package is cheap: the runner (subprocess, selectors, ...) is imported
only when a VM is actually started, and virtme-ng is only ever run as the ``vng``
executable. What the guest's own session needs to know about it lives in ``pytest_tcpnet.guest``.
"""

from __future__ import annotations

import os

from ..guest import BACKEND_ENV, IN_VM_ENV, inside_vm, software_emulated
from .options import add_options

__all__ = [
    "add_options",
    "asked",
    "maybe_run_in_vm",
    "inside_vm",
    "software_emulated",
    "use_host_for_analysis",
    "IN_VM_ENV",
    "ACCEL_ENV",
]

#: "1" in the guest's environment when the runner serves host calls (hostcall.py); "0" on the host turns them off.
HOSTCALL_ENV = "TCPNET_VM_HOSTCALL"
#: The guest's backend ("kvm", "tcg" or "uml"), in the guest's environment.
ACCEL_ENV = BACKEND_ENV


def use_host_for_analysis() -> bool:
    """In a guest whose runner offers it, decode pcaps and draw plots on the host (see hostcall)."""
    if not inside_vm() or os.environ.get(HOSTCALL_ENV) != "1":
        return False
    from .hostcall import use_host_for_analysis as use

    return use()


def asked(config) -> bool:
    """True when the session asks to run in a guest: --tcpnet-vm, or --tcpnet-deterministic (which implies it)."""
    return bool(config.getoption("tcpnet_vm", default=False) or config.getoption("tcpnet_deterministic", default=False))


def maybe_run_in_vm(config) -> int | None:
    """Re-run the session in a VM if ``--tcpnet-vm`` asks for it; return its exit code or None."""
    if not asked(config) or inside_vm():
        return None
    from .runner import run_config_in_vm  # deferred: only VM sessions pay for it

    return run_config_in_vm(config)
