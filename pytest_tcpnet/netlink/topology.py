"""Veth wiring, addresses, routes and offloads of a client – router – server path."""

import os
from dataclasses import dataclass

from pyroute2.netlink.exceptions import NetlinkError

from ..errors import LabError
from .namespaces import run_in_namespace, with_iproute, write_sysctls
from .rtnl import veth_peer_linkinfo
from .session import session_for

__all__ = ["interface_counters", "PathAddresses", "PATH_ADDRESSES", "wire_path", "set_offloads", "get_offloads", "OFFLOAD_FEATURES",
           "TSO_FEATURES"]


@dataclass(frozen=True)
class PathAddresses:
    """Interface names and addresses of one path; the same in every lab (namespaces isolate them)."""

    client_if: str = "veth-rtr"
    router_client_if: str = "veth-cli"
    router_server_if: str = "veth-srv"
    server_if: str = "veth-rtr"
    # RFC 2544 benchmarking range: never routed on the internet, never used by the host.
    client: str = "198.18.0.2"
    router_client_side: str = "198.18.0.1"
    router_server_side: str = "198.19.0.1"
    server: str = "198.19.0.2"
    prefixlen: int = 24


PATH_ADDRESSES = PathAddresses()

# Interface indexes the path's veths are created with (lo is 1 in a new namespace): chosen, so
# nothing has to be looked up afterwards.
_ROUTER_CLIENT_INDEX, _ROUTER_SERVER_INDEX, _ENDPOINT_INDEX = 2, 3, 2
_STATS_LINK_64 = 1 << (1 - 1)  # RTM_GETSTATS filter bit of IFLA_STATS_LINK_64 (attribute 1)

#: ethtool features that let a veth carry 64 KB super-packets (DESIGN pitfall 3). The TSO ones
#: decide whether a super-packet leaves the device whole; GSO and GRO build them in software.
TSO_FEATURES = ("tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-tcp-ecn-segmentation",
                "tx-tcp-mangleid-segmentation")
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


def _configure(ipr, ifname, address, prefixlen, routes, index=None):
    index = _index(ipr, ifname) if index is None else index
    ipr.addr("add", index=index, address=address, prefixlen=prefixlen)
    ipr.link("set", index=index, state="up")
    for dst, gateway in routes:
        ipr.route("add", dst=dst, gateway=gateway)


def wire_path(client_ns, router_ns, server_ns, addresses=PATH_ADDRESSES):
    """Create both veth pairs from inside the router, address them and route client <-> server.

    The veths are created in the router namespace with their peers placed straight into the
    endpoint namespaces, so no interface ever appears in the host namespace, even briefly.
    With sessions, each namespace gets one batch of requests (_wire_sessions).
    """
    a = addresses
    client_route = [(f"{_subnet(a.server)}/{a.prefixlen}", a.router_client_side)]
    server_route = [(f"{_subnet(a.client)}/{a.prefixlen}", a.router_server_side)]

    def make_veths(ipr):
        # Created up (IFF_UP in the request), which saves a request per router interface.
        ipr.link("add", ifname=a.router_client_if, kind="veth", state="up",
                 peer={"ifname": a.client_if, "net_ns_fd": client_ns})
        ipr.link("add", ifname=a.router_server_if, kind="veth", state="up",
                 peer={"ifname": a.server_if, "net_ns_fd": server_ns})

    def router_side(ipr):
        for ifname, address in ((a.router_client_if, a.router_client_side), (a.router_server_if, a.router_server_side)):
            ipr.addr("add", index=_index(ipr, ifname), address=address, prefixlen=a.prefixlen)

    def endpoint(ipr, ifname, address, routes):
        _configure(ipr, ifname, address, a.prefixlen, routes)

    sessions = [session_for(n) for n in (client_ns, router_ns, server_ns)]
    if all(s is not None and s.owned for s in sessions):  # namespaces we made: the chosen indexes are free
        _wire_sessions(*sessions, a, client_route, server_route)
        return
    _ipr_call(router_ns, "creating veth pairs", make_veths)
    _ipr_call(router_ns, "addressing the router", lambda ipr: (
        router_side(ipr), ipr.link("set", index=_index(ipr, "lo"), state="up")))
    write_sysctls(router_ns, {"net.ipv4.ip_forward": "1"})
    # Each endpoint reaches only the other endpoint's subnet through the router: no default route.
    _ipr_call(client_ns, "addressing the client", lambda ipr: (
        endpoint(ipr, a.client_if, a.client, client_route), ipr.link("set", index=_index(ipr, "lo"), state="up")))
    _ipr_call(server_ns, "addressing the server", lambda ipr: (
        endpoint(ipr, a.server_if, a.server, server_route), ipr.link("set", index=_index(ipr, "lo"), state="up")))


def _wire_sessions(client, router, server, a, client_route, server_route):
    """Wire a path whose namespaces have sessions: one batch of requests per namespace, sent from this thread.

    The router's batch creates both veth pairs (up, peers placed straight into the endpoints,
    every index chosen) and addresses its ends; each endpoint's batch then brings its end up
    (a peer cannot be created up), addresses it and adds its one route.
    """
    fds = [os.open(s.path, os.O_RDONLY | os.O_CLOEXEC) for s in (client, server)]
    try:
        router.batch("wiring the router", [
            ("link", "add", {"ifname": a.router_client_if, "index": _ROUTER_CLIENT_INDEX, "state": "up",
                             "attrs": [veth_peer_linkinfo(a.client_if, fds[0], _ENDPOINT_INDEX)]}),
            ("link", "add", {"ifname": a.router_server_if, "index": _ROUTER_SERVER_INDEX, "state": "up",
                             "attrs": [veth_peer_linkinfo(a.server_if, fds[1], _ENDPOINT_INDEX)]}),
            ("addr", "add", {"index": _ROUTER_CLIENT_INDEX, "address": a.router_client_side, "prefixlen": a.prefixlen}),
            ("addr", "add", {"index": _ROUTER_SERVER_INDEX, "address": a.router_server_side, "prefixlen": a.prefixlen}),
        ], indexes={a.router_client_if: _ROUTER_CLIENT_INDEX, a.router_server_if: _ROUTER_SERVER_INDEX})
    finally:
        for fd in fds:
            os.close(fd)
    for session, role, ifname, address, routes in ((client, "client", a.client_if, a.client, client_route),
                                                   (server, "server", a.server_if, a.server, server_route)):
        session.batch(f"addressing the {role}", [
            ("link", "set", {"index": _ENDPOINT_INDEX, "state": "up"}),
            ("addr", "add", {"index": _ENDPOINT_INDEX, "address": address, "prefixlen": a.prefixlen}),
            *[("route", "add", {"dst": dst, "gateway": gateway}) for dst, gateway in routes],
        ], indexes={ifname: _ENDPOINT_INDEX})
    if router.created_with.get("net.ipv4.ip_forward") != "1":  # a Lab's router has it from creation
        router.write_sysctls({"net.ipv4.ip_forward": "1"})


def interface_counters(namespace, ifname):
    """{rx_packets, tx_packets, rx_dropped, tx_dropped} of one interface (IFLA_STATS64)."""

    def counters(stats):
        stats = stats or {}
        return {k: stats.get(k, 0) for k in ("rx_packets", "tx_packets", "rx_dropped", "tx_dropped")}

    session = session_for(namespace)
    index = session and session.known_index(ifname)
    if index:
        # From this thread on the session's plain socket (no hop, no IPRoute to open), and RTM_GETSTATS for
        # just the 64-bit counters: a whole link message takes ~4x as long for pyroute2 to decode.
        (answer,) = session.query(f"reading counters of {ifname}", [
            ("stats", "get", {"ifindex": index, "filter_mask": _STATS_LINK_64})])
        return counters(answer[0].get_attr("IFLA_STATS_LINK_64"))
    return _ipr_call(namespace, f"reading counters of {ifname}",
                     lambda ipr: counters(ipr.get_links(_index(ipr, ifname))[0].get_attr("IFLA_STATS64")))


def _subnet(address):
    return ".".join(address.split(".")[:3]) + ".0"


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
