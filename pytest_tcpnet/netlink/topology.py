"""Veth wiring, addresses, routes and offloads of a world's namespaces."""

import os
from dataclasses import dataclass

from pyroute2.netlink.exceptions import NetlinkError

from ..errors import LabError
from .namespaces import run_in_namespace, with_iproute
from .rtnl import veth_peer_linkinfo
from .session import session_for

__all__ = ["interface_counters", "Veth", "wire", "set_offloads", "get_offloads", "OFFLOAD_FEATURES", "TSO_FEATURES"]


@dataclass(frozen=True)
class Veth:
    """One veth pair: end a is created in namespace a_ns, its peer (end b) straight in b_ns; both addressed.

    Indexes are chosen by the caller (unique per namespace; lo is 1), so nothing is looked up
    afterwards, and no interface ever appears in the host namespace, even briefly. Addresses:
    ((address, prefixlen), ...) per end, IPv4 and/or IPv6 (added without duplicate address
    detection: the lab made every address and knows them unique, and DAD would hold an IPv6
    address back for a second or more).
    """

    a_ns: str
    a_if: str
    a_index: int
    a_addresses: tuple
    b_ns: str
    b_if: str
    b_index: int
    b_addresses: tuple


_IFA_F_NODAD = 0x02


def _addr_requests(index, addresses):
    return [
        (
            "addr",
            "add",
            {
                "index": index,
                "address": address,
                "prefixlen": prefixlen,
                **({"flags": _IFA_F_NODAD} if ":" in address else {}),
            },
        )
        for address, prefixlen in addresses
    ]


_STATS_LINK_64 = 1 << (1 - 1)  # RTM_GETSTATS filter bit of IFLA_STATS_LINK_64 (attribute 1)

#: ethtool features that let a veth carry 64 KB super-packets (docs/design.md, pitfall 3). The TSO ones
#: decide whether a super-packet leaves the device whole; GSO and GRO build them in software.
TSO_FEATURES = (
    "tx-tcp-segmentation",
    "tx-tcp6-segmentation",
    "tx-tcp-ecn-segmentation",
    "tx-tcp-mangleid-segmentation",
)
OFFLOAD_FEATURES = TSO_FEATURES + ("tx-generic-segmentation", "rx-gro")


def _ipr_call(namespace, what, function):
    try:
        return with_iproute(namespace, function, what)
    except NetlinkError as exc:
        raise LabError(f"{what} in namespace {namespace} failed: {exc}") from exc


def _index(ipr, ifname):
    """Interface index by name, remembered on the socket (a lab never renames or recreates an interface)."""
    cache = ipr.__dict__.setdefault("_tcpnet_indexes", {})
    if ifname not in cache:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise LabError(f"interface {ifname} not found")
        cache[ifname] = found[0]
    return cache[ifname]


_NUD_PERMANENT = 0x80


def _mac(number, end):
    """A locally administered unicast MAC for end 1 (a) or 2 (b) of veth `number`: unique on its link."""
    return f"02:00:{(number >> 16) & 0xFF:02x}:{(number >> 8) & 0xFF:02x}:{number & 0xFF:02x}:{end:02x}"


def _neighbour_requests(index, addresses, mac):
    """Permanent neighbour entries for the far end's addresses on our end `index`."""
    return [
        ("neigh", "add", {"ifindex": index, "dst": address, "lladdr": mac, "state": _NUD_PERMANENT})
        for address, _ in addresses
    ]


def wire(veths, routes):
    """Create and address every veth, then add each namespace's routes ({namespace: [(dst/len, gateway)]}).

    Two rounds of one netlink batch per namespace, sent from this thread: first each namespace
    creates the veths it holds end a of (up, peers placed straight into their namespaces, every
    index chosen) and addresses those ends; then each brings its b ends up (a peer cannot be
    created up), addresses them and adds its routes, whose gateways are all on-link by then.
    Every namespace must be one this process created (its session known).

    Each end gets a MAC of our choosing and permanent neighbour entries for its peer's
    addresses: no ARP or neighbour discovery ever runs, so none crosses a router's netem (a
    first connection would otherwise wait a delayed ARP exchange per shaped hop: docs/topologies.md),
    and neighbour entries never go stale mid-measurement.
    """
    namespaces = list(dict.fromkeys([v.a_ns for v in veths] + [v.b_ns for v in veths] + list(routes)))
    sessions = {name: session_for(name) for name in namespaces}
    missing = [name for name, session in sessions.items() if session is None or not session.owned]
    if missing:
        raise LabError(f"wiring needs namespaces this process created; not ours: {', '.join(missing)}")
    fds = {}
    try:
        for veth in veths:
            if veth.b_ns not in fds:
                fds[veth.b_ns] = os.open(sessions[veth.b_ns].path, os.O_RDONLY | os.O_CLOEXEC)
        macs = {v: (_mac(number, 1), _mac(number, 2)) for number, v in enumerate(veths)}
        for name in namespaces:
            held = [v for v in veths if v.a_ns == name]
            if held:
                sessions[name].batch(
                    f"creating veths {', '.join(v.a_if for v in held)}",
                    [
                        *[
                            (
                                "link",
                                "add",
                                {
                                    "ifname": v.a_if,
                                    "index": v.a_index,
                                    "state": "up",
                                    "address": macs[v][0],
                                    "attrs": [veth_peer_linkinfo(v.b_if, fds[v.b_ns], v.b_index, macs[v][1])],
                                },
                            )
                            for v in held
                        ],
                        *[request for v in held for request in _addr_requests(v.a_index, v.a_addresses)],
                        *[
                            request
                            for v in held
                            for request in _neighbour_requests(v.a_index, v.b_addresses, macs[v][1])
                        ],
                    ],
                    indexes={v.a_if: v.a_index for v in held},
                )
    finally:
        for fd in fds.values():
            os.close(fd)
    for name in namespaces:
        peers = [v for v in veths if v.b_ns == name]
        requests = [
            *[("link", "set", {"index": v.b_index, "state": "up"}) for v in peers],
            *[request for v in peers for request in _addr_requests(v.b_index, v.b_addresses)],
            *[request for v in peers for request in _neighbour_requests(v.b_index, v.a_addresses, macs[v][0])],
            *[("route", "add", {"dst": dst, "gateway": gateway}) for dst, gateway in routes.get(name, ())],
        ]
        if requests:
            sessions[name].batch(
                f"addressing {', '.join(v.b_if for v in peers) or 'routes'}",
                requests,
                indexes={v.b_if: v.b_index for v in peers},
            )


def interface_counters(namespace, ifname):
    """{rx_packets, tx_packets, rx_dropped, tx_dropped} of one interface (IFLA_STATS64)."""

    def counters(stats):
        stats = stats or {}
        return {k: stats.get(k, 0) for k in ("rx_packets", "tx_packets", "rx_dropped", "tx_dropped")}

    session = session_for(namespace)
    index = session and session.known_index(ifname)
    if index:
        # From this thread on the session's plain socket (no hop, no IPRoute to open), and RTM_GETSTATS for
        # just the 64-bit counters: a whole link message takes pyroute2 far longer to decode (benchmarks/NOTES.md).
        (answer,) = session.query(
            f"reading counters of {ifname}", [("stats", "get", {"ifindex": index, "filter_mask": _STATS_LINK_64})]
        )
        return counters(answer[0].get_attr("IFLA_STATS_LINK_64"))
    return _ipr_call(
        namespace,
        f"reading counters of {ifname}",
        lambda ipr: counters(ipr.get_links(_index(ipr, ifname))[0].get_attr("IFLA_STATS64")),
    )


def _with_ethtool(namespace, function):
    """Call function(ethtool) inside the namespace: the session's ethtool ioctl socket if it has one, else a fresh one."""
    session = session_for(namespace)
    if session is not None:
        return session.with_ethtool("setting offloads", function)
    from pyroute2.ethtool.ioctl import IoctlEthtool

    def call():
        eth = IoctlEthtool()
        try:
            return function(eth)
        finally:
            eth.close()

    return run_in_namespace(namespace, call)


def set_offloads(namespace, ifname, enabled, names=OFFLOAD_FEATURES):
    """Turn the named offloads on or off on one interface; return what the kernel kept (all of OFFLOAD_FEATURES)."""

    def apply(eth):
        eth.change_ifname(ifname)
        features = eth.get_features()
        available = {name for name, _, can_change, *_ in features if can_change}
        for name in names:
            if name in available:
                features[name] = enabled
        eth.set_features(features)
        return _read_offloads(eth, ifname)

    return _with_ethtool(namespace, apply)


def get_offloads(namespace, ifname):
    """{feature: enabled} for the segmentation/GRO offloads of one interface."""
    return _with_ethtool(namespace, lambda eth: _read_offloads(eth, ifname))


def _read_offloads(eth, ifname):
    eth.change_ifname(ifname)
    enabled = {name: enable for name, enable, *_ in eth.get_features()}
    return {name: enabled[name] for name in OFFLOAD_FEATURES if name in enabled}
