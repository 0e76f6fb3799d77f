"""What a session knows of where it runs: the host, or a --tcpnet-vm guest on which backend.

The one module the core (results, netlink, the session header) asks about the guest: the VM runner sets
these variables in the guest's environment, and nothing here imports the runner.
"""

from __future__ import annotations

import os

__all__ = [
    "IN_VM_ENV",
    "BACKEND_ENV",
    "WHY_ENV",
    "TIME_TRAVEL_ENV",
    "BACKEND_NAMES",
    "inside_vm",
    "backend",
    "why",
    "software_emulated",
    "time_travel",
    "conditions",
]

#: Set to "1" in the guest's environment; also what stops the guest from recursing.
IN_VM_ENV = "TCPNET_IN_VM"
#: The guest's backend ("kvm", "tcg" or "uml"), in the guest's environment (the name it had when it named only
#: qemu's accelerator).
BACKEND_ENV = "TCPNET_VM_ACCEL"
#: Why the runner chose that backend, in the guest's environment.
WHY_ENV = "TCPNET_VM_BACKEND_WHY"
#: Set to "1" in a User-Mode Linux guest with time travel (--tcpnet-deterministic): its clock moves only by its own
#: timers, so CPU work takes no guest time and the host's load none.
TIME_TRAVEL_ENV = "TCPNET_TIME_TRAVEL"
BACKEND_NAMES = {"kvm": "KVM guest", "tcg": "software-emulated guest (TCG)", "uml": "User-Mode Linux guest"}


def inside_vm() -> bool:
    """True in a session the VM runner started in a guest."""
    return os.environ.get(IN_VM_ENV) == "1"


def backend() -> str:
    """ "host", or the guest's backend: "kvm", "tcg", "uml"."""
    if not inside_vm():
        return "host"
    return os.environ.get(BACKEND_ENV) or "unknown"


def software_emulated() -> bool:
    """True in a guest under software emulation (TCG): its CPU is far slower and shared.

    Timing-sensitive tests may then need a coarser operating point: endpoints there add
    milliseconds per round trip (more when the host is busy), which a fast path cannot hide
    (docs/vm.md has the figures).
    """
    return backend() == "tcg"


def time_travel() -> bool:
    """True in a guest whose clock only its own timers move (--tcpnet-deterministic)."""
    return inside_vm() and os.environ.get(TIME_TRAVEL_ENV) == "1"


def why() -> str:
    """Why the runner chose this guest's backend ("" on the host)."""
    return os.environ.get(WHY_ENV, "") if inside_vm() else ""


def conditions() -> str:
    """Words for a result's conditions: "" on the host, else which guest ran it ("User-Mode Linux guest")."""
    name = backend()
    if name == "host":
        return ""
    return BACKEND_NAMES.get(name, f"{name} guest") + (" with time travel" if time_travel() else "")
