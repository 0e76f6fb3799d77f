"""A snapshot of everything the host namespace must keep: links, addresses, routes, qdiscs, net sysctls."""

import os

from pyroute2 import IPRoute

# Counters and caches the kernel changes on its own, whoever runs: not configuration.
VOLATILE_SYSCTLS = {
    "net/netfilter/nf_conntrack_count", "net/ipv4/tcp_fastopen_key", "net/core/netdev_rss_key",
}


def _links(ipr):
    return sorted((l.get_attr("IFLA_IFNAME"), l["index"], l.get_attr("IFLA_OPERSTATE"), l.get_attr("IFLA_MTU"),
                   l.get_attr("IFLA_ADDRESS"), l["flags"]) for l in ipr.get_links())


def _addresses(ipr):
    return sorted((a["index"], a.get_attr("IFA_ADDRESS"), a["prefixlen"]) for a in ipr.get_addr())


def _routes(ipr):
    rows = []
    for family in (2, 10):
        for r in ipr.get_routes(family=family, table=0):
            rows.append((family, r.get_attr("RTA_TABLE"), r.get_attr("RTA_DST"), r["dst_len"],
                         r.get_attr("RTA_GATEWAY"), r.get_attr("RTA_OIF"), r["type"]))
    return sorted(rows, key=repr)


def _qdiscs(ipr):
    return sorted((q["index"], q.get_attr("TCA_KIND"), q["handle"], q["parent"]) for q in ipr.get_qdiscs())


def _sysctls():
    values = {}
    for root, _, files in os.walk("/proc/sys/net"):
        for name in files:
            path = os.path.join(root, name)
            key = path[len("/proc/sys/"):]
            if key in VOLATILE_SYSCTLS:
                continue
            try:
                with open(path) as f:
                    values[key] = f.read()
            except OSError:
                continue  # write-only entries such as route/flush
    return values


def snapshot():
    """Everything we promise not to change in the namespace this process runs in."""
    with IPRoute() as ipr:
        return {"links": _links(ipr), "addresses": _addresses(ipr), "routes": _routes(ipr),
                "qdiscs": _qdiscs(ipr), "sysctls": _sysctls()}


def differences(before, after):
    """Human-readable list of what changed between two snapshots."""
    diffs = []
    for key in ("links", "addresses", "routes", "qdiscs"):
        gone = [x for x in before[key] if x not in after[key]]
        new = [x for x in after[key] if x not in before[key]]
        if gone or new:
            diffs.append(f"{key}: removed {gone}, added {new}")
    for name in sorted(set(before["sysctls"]) | set(after["sysctls"])):
        if before["sysctls"].get(name) != after["sysctls"].get(name):
            diffs.append(f"sysctl {name}: {before['sysctls'].get(name)!r} -> {after['sysctls'].get(name)!r}")
    return diffs
