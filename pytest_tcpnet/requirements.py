"""What a test needs from the machine ("netem", "bbr", "tshark", "kernel>=6.6") and whether it is here."""

import os
import re

from . import guest
from .errors import MissingCapability, program_path
from .model import KNOWN_CONGESTION_CONTROLS, KernelVersion

__all__ = [
    "check_need",
    "check_needs",
    "describe_machine",
    "QDISC_NEEDS",
    "ACTION_NEEDS",
    "TOOL_NEEDS",
    "MACHINE_NEEDS",
]

QDISC_NEEDS = frozenset(
    {
        "netem",
        "htb",
        "tbf",
        "pfifo",
        "bfifo",
        "ingress",
        "clsact",
        "fq_codel",
        "codel",
        "cake",
        "pie",
        "fq_pie",
        "red",
        "fq",
    }
)
#: Actions a test can need, by their tc name ("police": act_police, probed on a match-all filter).
ACTION_NEEDS = frozenset({"police"})
TOOL_NEEDS = {
    "tshark": "tshark",
    "iperf3": "iperf3",
    "curl": "curl",
    "nsenter": "util-linux",
    # A real third-party server for examples/test_redis.py (dev/setup installs it; no system service is started).
    "redis-server": "redis-server",
    "redis-benchmark": "redis-tools",
}
#: Needs of the machine itself: "smp", CPUs for two busy processes at once (a User-Mode Linux guest has one).
MACHINE_NEEDS = {"smp": "two or more CPUs at once"}
_KERNEL_NEED = re.compile(r"^kernel\s*(>=|<=|==|>|<)\s*(\d+\.\d+(?:\.\d+)?)$")
_OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
}


def check_need(need):
    """Raise MissingCapability if `need` is not met here; ValueError if it is not a need we know."""
    from . import netlink  # lazy: pyroute2 only when a lab-ish need is checked

    if not isinstance(need, str):
        raise TypeError(f"need: expected a string like 'netem' or 'kernel>=6.6', got {need!r}")
    release = netlink.kernel_release()
    if need == "smp":
        cpus = len(os.sched_getaffinity(0))
        if cpus < 2:
            where = f"a {guest.conditions()}" if guest.conditions() else "this machine"
            raise MissingCapability(
                need,
                f"{where} gives this test {cpus} CPU, and it needs two busy at once (a "
                "starved receiver beside its sender): run it on the host or on a qemu backend "
                "(--tcpnet-vm-backend=tcg or kvm)",
            )
        return
    if need in ("root", "privilege"):
        if not netlink.has_net_admin():
            from .rootless import privilege_hint

            raise MissingCapability(need, f"building a lab needs CAP_NET_ADMIN and CAP_SYS_ADMIN {privilege_hint()}")
        return
    if need in QDISC_NEEDS or need in ACTION_NEEDS:
        if not netlink.has_net_admin():
            raise MissingCapability(need, f"cannot probe for sch_{need} without CAP_NET_ADMIN (run as root)")
        if not netlink.qdisc_supported(need):
            hint = (
                (
                    "; run the session under a kernel that has it: `pytest --tcpnet-vm` (README: 'Running under "
                    "a chosen kernel')"
                )
                if need == "netem"
                else ""
            )
            module = f"act_{need}" if need in ACTION_NEEDS else f"sch_{need}"
            if need != "netem":
                hint = "; run the session in the pinned-kernel VM: `pytest --tcpnet-vm` (docs/vm.md)"
            raise MissingCapability(need, f"kernel {release} has no {module}{hint}")
        return
    if need in KNOWN_CONGESTION_CONTROLS:
        available = netlink.available_congestion_controls()
        if need not in available:
            raise MissingCapability(
                need,
                f"congestion control {need!r} is not available on kernel {release} "
                f"(available: {' '.join(sorted(available))})",
            )
        return
    if need in TOOL_NEEDS:
        program_path(need, package=TOOL_NEEDS[need])
        return
    match = _KERNEL_NEED.match(need.replace(" ", ""))
    if match:
        op, wanted = match.groups()
        if not _OPS[op](KernelVersion.parse(release), KernelVersion.parse(wanted)):
            raise MissingCapability(
                need,
                f"kernel {release} does not satisfy {op}{wanted}; "
                f"run under another kernel with `pytest --tcpnet-vm --tcpnet-kernel=...`",
            )
        return
    raise ValueError(
        f"unknown need {need!r}; known: privilege, smp, {', '.join(sorted(QDISC_NEEDS | ACTION_NEEDS))}, "
        f"a congestion control name, {', '.join(TOOL_NEEDS)}, or 'kernel>=X.Y' (>=, <=, ==, >, <)"
    )


def check_needs(needs):
    """check_need for each; the first missing one raises."""
    for need in needs:
        check_need(need)


def describe_machine():
    """One line for pytest's report header: kernel, privilege, netem, congestion controls."""
    from . import netlink

    if not netlink.has_net_admin():
        return f"tcpnet: kernel {netlink.kernel_release()}, no CAP_NET_ADMIN (lab tests will skip)"
    qdiscs = " ".join(f"{q}={'yes' if netlink.qdisc_supported(q) else 'NO'}" for q in ("netem", "htb", "tbf"))
    ccs = " ".join(sorted(netlink.available_congestion_controls()))
    where = f" in a {guest.conditions()}" if guest.conditions() else ""
    why = f"\ntcpnet: backend chosen: {guest.why()}" if guest.why() else ""
    return f"tcpnet: kernel {netlink.kernel_release()}{where}, {qdiscs}, cc: {ccs}{why}"
