"""What this kernel and process can do: privilege, qdisc kinds, congestion controls."""

import ctypes
import functools
import os

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from ..locks import in_user_namespace
from ..model import KNOWN_CONGESTION_CONTROLS
from ..privilege import has_net_admin
from .namespaces import call_in_own_thread

__all__ = ["has_net_admin", "qdisc_supported", "available_congestion_controls", "kernel_release"]

_CLONE_NEWNET = 0x40000000


def _unshare_network():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")


def _in_private_namespace(function):
    """Run function in a thread that unshared a fresh, anonymous network namespace.

    The namespace has no name and dies with the thread, so a probe leaves nothing behind
    even if the process is killed mid-way.
    """
    return call_in_own_thread(_unshare_network, function, name="tcpnet-probe")


# The least each qdisc kind needs to be created (pyroute2 insists on these).
_PROBE_ARGUMENTS = {"tbf": {"rate": "1mbit", "burst": 16000, "latency": 50000}}


def _probe_queue(kind):
    """The smallest valid Queue of a queue kind, for a probe."""
    from ..model.queues import check_queue

    options = {"bandwidth": 10e6} if kind == "red" else None
    return check_queue("", kind, "400kb" if kind == "red" else None, None, options)


@functools.cache
def qdisc_supported(kind):
    """True if the kernel accepts a qdisc of this kind (probed on lo of a throwaway namespace).

    "police" probes the police action (act_police) on a match-all filter under an htb root.
    """
    from ..model.queues import QUEUE_KINDS
    from .queues import options_flagged_nested, queue_options
    from .rtnl import RtnlSocket

    def probe():
        if kind in QUEUE_KINDS:
            # The same encoder the labs use, so "supported" means "what we send is accepted".
            queue_kind, options = queue_options(_probe_queue(kind))
            sock = RtnlSocket()
            try:
                sock.batch(
                    [
                        (
                            "tc",
                            "add-raw",
                            dict(
                                index=1,
                                handle=0x10000,
                                parent=0xFFFFFFFF,
                                kind=queue_kind,
                                options=options,
                                nested_flag=options_flagged_nested(kind),
                            ),
                        )
                    ]
                )
                return True
            except NetlinkError:
                return False
            finally:
                sock.close()
        with IPRoute() as ipr:
            try:
                if kind == "police":
                    ipr.tc("add", "htb", index=1, handle=0x10000, default=1)
                    ipr.tc(
                        "add-filter",
                        "u32",
                        index=1,
                        parent=0x10000,
                        prio=1,
                        protocol=3,
                        target=0x10001,
                        keys=["0x0/0x0+0"],
                        action=[dict(kind="police", rate="1mbit", burst=15140, limit=0, action="drop")],
                    )
                else:
                    ipr.tc("add", kind, index=1, handle=0x10000, **_PROBE_ARGUMENTS.get(kind, {}))
                return True
            except NetlinkError:
                return False

    try:
        return _in_private_namespace(probe)
    except OSError:
        return False


def available_congestion_controls():
    """Congestion controls usable now: loaded ones plus modules present for this kernel."""
    names = set()
    try:
        with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
            names.update(f.read().split())
    except OSError:
        pass
    if in_user_namespace():
        return names  # the kernel autoloads a module only for the initial namespace's CAP_NET_ADMIN
    moddir = f"/lib/modules/{kernel_release()}/kernel/net/ipv4"
    try:
        for entry in os.listdir(moddir):
            name = entry[4:].split(".ko")[0]
            # tcp_diag.ko and friends live there too: only algorithm modules count.
            if entry.startswith("tcp_") and ".ko" in entry and name in KNOWN_CONGESTION_CONTROLS:
                names.add(name)
    except OSError:
        pass
    return names


@functools.cache
def kernel_release():
    """uname -r."""
    return os.uname().release
