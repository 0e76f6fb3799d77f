"""Host guard: what a session must leave as it found it in the host namespace, and the differences if it did not.

``snapshot()`` reads the namespace the calling thread is in: links, addresses, routes (every
table, IPv4 and IPv6), policy rules, qdiscs and every readable sysctl under /proc/sys/net.
``differences(before, after)`` names each change in one line. The pytest option
``--tcpnet-host-guard`` takes a snapshot at session start and fails the session with the
differences at its end.
"""

import os

from . import netlink

__all__ = ["VOLATILE_SYSCTLS", "snapshot", "differences"]

#: Sysctls the kernel changes on its own, whoever runs: counters, lazily made keys, and the list
#: of loaded congestion-control modules (a per-socket TCP_CONGESTION may load one): not configuration.
VOLATILE_SYSCTLS = frozenset(
    {
        "net/netfilter/nf_conntrack_count",
        "net/ipv4/tcp_fastopen_key",
        "net/core/netdev_rss_key",
        "net/ipv4/tcp_available_congestion_control",
    }
)
_NETWORK_KINDS = ("links", "addresses", "routes", "rules", "qdiscs")


def _sysctls():
    values = {}
    for root, _, files in os.walk("/proc/sys/net"):
        for name in files:
            path = os.path.join(root, name)
            key = path[len("/proc/sys/") :]
            if key in VOLATILE_SYSCTLS:
                continue
            try:
                with open(path) as f:
                    values[key] = f.read()
            except OSError:
                continue  # write-only entries such as route/flush, or unreadable without privilege
    return values


def snapshot():
    """Everything we promise not to change in the namespace the calling thread is in."""
    return {**netlink.network_state(), "sysctls": _sysctls()}


def differences(before, after):
    """One line per change between two snapshots ([] when nothing changed)."""
    diffs = []
    for kind in _NETWORK_KINDS:
        gone = [x for x in before[kind] if x not in after[kind]]
        new = [x for x in after[kind] if x not in before[kind]]
        if gone or new:
            diffs.append(f"{kind}: removed {gone}, added {new}")
    for name in sorted(set(before["sysctls"]) | set(after["sysctls"])):
        old, now = before["sysctls"].get(name), after["sysctls"].get(name)
        if old != now:
            show = lambda v: "(absent)" if v is None else repr(" ".join(v.split()))
            diffs.append(f"sysctl {name.replace('/', '.')}: {show(old)} -> {show(now)}")
    return diffs
