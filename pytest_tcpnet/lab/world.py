"""The one builder of worlds: hosts and routers in namespaces, veth links between them, routes, shaping.

A preset (pair, star, dumbbell) describes its world with host(), router(), connect() and
shape(), then build() creates it at once: every namespace with its sysctls, every veth created
inside a namespace with its peer placed straight into the other (nothing ever appears in the
host namespace), addresses and routes, router offloads off, then the qdiscs. A failed build
removes whatever it made. The world knows no workload.
"""

import collections
import contextlib
import ipaddress
import os
import socket
import warnings
from dataclasses import dataclass

from .. import guest, netlink
from ..errors import LabError, UnboundedPathWarning
from ..measure.run import run_workloads
from ..model import Host, OneWay
from ..model.validation import check_number
from ..requirements import check_need
from ..results import WorkloadRun, with_take
from ..workload.base import Workload
from .node import Node

__all__ = ["World", "WorldView", "End", "TEST_NETWORK", "TEST_NETWORK6", "FAMILIES"]

#: RFC 2544's benchmarking range: never routed on the internet, never used by the host.
TEST_NETWORK = ipaddress.IPv4Network("198.18.0.0/15")
#: RFC 5180's IPv6 benchmarking prefix: link k of the plan (198.18.k.0/24, 198.19.k.0/24 as k + 256)
#: is 2001:2:0:k::/64.
TEST_NETWORK6 = ipaddress.IPv6Network("2001:2::/48")
#: What a world's endpoints speak: IPv4, IPv6, or both (addresses of both, IPv4 the primary).
FAMILIES = ("ipv4", "ipv6", "dual")
_CC_SYSCTL = "net.ipv4.tcp_congestion_control"
_MAX_IFNAME = 15  # IFNAMSIZ - 1


@dataclass(frozen=True)
class End:
    """One end of a link: the node it is in, its interface name, its addresses (primary first)."""

    node: Node
    ifname: str
    addresses: tuple  # ((address, prefixlen), ...)

    @property
    def address(self):
        """The primary address: IPv6 in an IPv6 world, else IPv4."""
        return self.addresses[0][0]

    @property
    def key(self):
        """'node name/ifname' ("router/veth-cli", "left/veth-c0"): how counters and offloads are keyed."""
        return f"{self.node.name}/{self.ifname}"


class World:
    """Namespaces wired as described (see the module); close() removes every one of them."""

    def __init__(self, lab, index, *, endpoint_offloads="wire", family="ipv4", seed=None):
        if family not in FAMILIES:
            raise ValueError(f"family: must be one of {', '.join(FAMILIES)}, got {family!r}")
        self.lab = lab
        self.index = index
        #: The seed every netem qdisc of this world derives its own from (netlink.netem_seed), or None: the kernel's.
        self.seed = seed
        self.family = family
        self.nodes = {}
        self.hosts = {}
        self.links = []
        self.offloads = {}
        self.qdisc_plan = {}
        self.socket_cc = {}
        self.closed = False
        self._endpoint_offloads = endpoint_offloads
        self._shaping = collections.defaultdict(list)
        self._next_ifindex = {}
        self._subnets = set()
        self._created = []

    # -- describing ---------------------------------------------------------------------------
    def host(self, name, role, spec):
        """An endpoint namespace set up by a Host spec (its sysctls, its congestion control)."""
        if not isinstance(spec, Host):
            raise TypeError(f"{name}: expected a Host, got {spec!r}")
        node = self._node(name, role)
        self.hosts[name] = spec
        return node

    def router(self, name):
        """A forwarding namespace; the only kind of node a link may be shaped on (docs/design.md, pitfall 1)."""
        return self._node(name, "router")

    def _node(self, name, role):
        if name in self.nodes:
            raise ValueError(f"node {name!r}: already in this world")
        suffix = {"client": "c", "router": "r", "server": "s"}.get(name, name)
        namespace = f"{netlink.PREFIX}{netlink.owner_tag()}-{self.index}{suffix}"
        node = Node(role, name, namespace)
        self.nodes[name] = node
        self._next_ifindex[name] = 2  # lo is 1 in a new namespace
        return node

    @property
    def socket_families(self):
        """The socket address families the world's endpoints use (AF_INET and/or AF_INET6)."""
        return {"ipv4": (socket.AF_INET,), "ipv6": (socket.AF_INET6,), "dual": (socket.AF_INET, socket.AF_INET6)}[
            self.family
        ]

    def connect(self, a, b, *, subnet, ifnames=None):
        """A veth between nodes a and b on a /24 of the test network (and its /64 of 2001:2::/48 in an IPv6 or
        dual world): a gets .1 (::1), b .2 (::2); returns (end a, end b)."""
        network = ipaddress.IPv4Network(subnet)
        if not network.subnet_of(TEST_NETWORK) or network.prefixlen != 24:
            raise ValueError(f"subnet: {subnet} is not a /24 inside {TEST_NETWORK}")
        if network in self._subnets:
            raise ValueError(f"subnet: {subnet} is another link's")
        networks = {"ipv4": [network], "ipv6": [_ipv6_of(network)], "dual": [network, _ipv6_of(network)]}[self.family]
        a_if, b_if = ifnames or (f"veth-{b.name}", f"veth-{a.name}")
        ends = []
        for node, ifname, host in ((a, a_if, 1), (b, b_if, 2)):
            if not 0 < len(ifname) <= _MAX_IFNAME or any(ifname == name for name, _ in node.interfaces):
                raise ValueError(f"interface {ifname!r} in {node.name}: empty, longer than {_MAX_IFNAME} or taken")
            end = End(node, ifname, tuple((str(net.network_address + host), net.prefixlen) for net in networks))
            node.interfaces.append((ifname, end.address))
            if node.address is None:
                node.address, node.interface = end.address, ifname
            node.addresses.extend(address for address, _ in end.addresses)
            ends.append(end)
        self._subnets.add(network)
        self.links.append((ends[0], ends[1], networks))
        return tuple(ends)

    def shape(self, end, way, match=None):
        """Shape what leaves `end` (a router's) by `way` (a OneWay); match: only packets matching it, or any of a
        list of matches (netlink.shape_egress_classes says what a match is). A way scoped to TCP ports
        (Link(ports=...)) narrows every match to those ports."""
        if end.node.role != "router":
            raise ValueError(
                f"shape: {end.key} is on a {end.node.role}; links are shaped on a router's egress, "
                "never on an endpoint's own interface (TCP Small Queues would see the qdisc)"
            )
        if not isinstance(way, OneWay):
            raise TypeError(f"way: expected a OneWay, got {way!r}")
        if match is not None:
            match = [match] if isinstance(match, dict) else list(match)
        if way.ports:
            # The impairment applies to TCP traffic to or from its ports only: a class whose filters match
            # either port field (of each family the world speaks, where no address says which).
            families = [{"family": version} for version in {"ipv4": (4,), "ipv6": (6,), "dual": (4, 6)}[self.family]]
            match = [
                dict(base, **{field: port})
                for base in (match or families)
                for port in way.ports
                for field in ("sport", "dport")
            ]
        if match is not None:
            if way.changes:
                raise ValueError(
                    f"shape: a link that changes while a flow runs (a Schedule) is shaped on a whole "
                    f"interface; {end.key} shapes chosen traffic (a star's per-server link, or ports=), "
                    "which cannot change in place yet"
                )
            for one in match:
                netlink.u32_keys(one)  # a bad match is refused now, before anything exists
        rules = self._shaping[end]
        if rules and (match is None or rules[0][0] is None):
            raise ValueError(f"shape: {end.key} is shaped either whole (once) or by matches, not both")
        rules.append((match, way))

    # -- building -----------------------------------------------------------------------------
    def build(self):
        """Create the whole world; on any failure remove what was made and raise."""
        try:
            self._build()
        except BaseException:
            with contextlib.suppress(Exception):
                self.close()
            raise

    def _build(self):
        if self.seed is not None and any(
            phase.needs_netem for rules in self._shaping.values() for _, way in rules for _, phase in way.phases
        ):
            check_need(netlink.NETEM_SEED_NEED)  # an older kernel would ignore the seed
        if guest.time_travel() and not any(
            phase.rate_bps for rules in self._shaping.values() for _, way in rules for _, phase in way.phases
        ):
            warnings.warn(
                UnboundedPathWarning(
                    "no link of this world has a rate: in a time-travel guest (--tcpnet-deterministic) CPU work takes "
                    "no guest time, so an unshaped flow runs at whatever the clock reads allow (hundreds of Gbit/s, "
                    "minutes of wall time for seconds of flow); give the path a rate (docs/deterministic.md)"
                ),
                stacklevel=3,
            )
        # Each namespace is created by its session's thread (unshare + bind mount, no fork), which
        # writes its sysctls on the spot and then serves every later netlink call of this world.
        sysctls = {}
        # IPv6: no duplicate address detection on the interfaces to come (their link-local addresses
        # would wait a second or more, tentative), and routers forward.
        # IPv4 only: no IPv6 on the interfaces to come (lo keeps ::1), so no router solicitation, MLD report or DAD
        # probe crosses the world's qdiscs, sent whenever its timers say: each would take one of netem's draws (a
        # seeded link's losses would shift with them) and count as the path's traffic.
        no_v6 = "net.ipv6.conf.default.disable_ipv6"
        v6 = (
            ({no_v6: "1"} if netlink.sysctl_exists(no_v6) else {})
            if self.family == "ipv4"
            else {"net.ipv6.conf.all.accept_dad": "0", "net.ipv6.conf.default.accept_dad": "0"}
        )
        for name, node in self.nodes.items():
            if node.role == "router":
                sysctls[node.namespace] = {
                    "net.ipv4.ip_forward": "1",
                    **v6,
                    **({"net.ipv6.conf.all.forwarding": "1"} if self.family != "ipv4" else {}),
                }
            else:
                sysctls[node.namespace] = {
                    **v6,
                    **{k: v for k, v in self.hosts[name].sysctls.items() if k != _CC_SYSCTL},
                }
        netlink.create_namespaces(sysctls)
        self._created.extend(node.namespace for node in self.nodes.values())  # all or none
        netlink.wire(self._veths(), self._routes())
        # From this thread, one after the other: the sessions' sockets work from any thread, and
        # several threads configuring at once only queued for the GIL (and paid a hop each).
        for a, b, _ in self.links:
            for end in (a, b):
                if end.node.role == "router":
                    # Router hops carry real packets, not 64 KB super-packets, so qdiscs and captures count right.
                    self.offloads[end.key] = netlink.set_offloads(end.node.namespace, end.ifname, False)
        for end, rules in self._shaping.items():
            seed = self.seed_of(end)
            if rules[0][0] is None:
                self.qdisc_plan[end.ifname] = netlink.shape_egress(end.node.namespace, end.ifname, rules[0][1], seed)
            else:
                self.qdisc_plan[end.ifname] = [
                    f"{where}: {line}"
                    for where, lines in netlink.shape_egress_classes(
                        end.node.namespace, end.ifname, rules, seed
                    ).items()
                    for line in lines
                ]
        if self.seed is not None:
            self._check_seeds()
        for name, spec in self.hosts.items():
            self._configure_endpoint(self.nodes[name], spec)

    def _veths(self):
        veths = []
        for a, b, _ in self.links:
            a_index, b_index = self._take_ifindex(a.node), self._take_ifindex(b.node)
            veths.append(
                netlink.Veth(
                    a.node.namespace, a.ifname, a_index, a.addresses, b.node.namespace, b.ifname, b_index, b.addresses
                )
            )
        return veths

    def _take_ifindex(self, node):
        index = self._next_ifindex[node.name]
        self._next_ifindex[node.name] += 1
        return index

    def _routes(self):
        """{namespace: [(dst, gateway)]}: a host with one link sends the whole test network (each family's) to its
        neighbour; any other node gets a route to each subnet it is not on, via the next hop of a shortest path."""
        neighbours = collections.defaultdict(list)  # name -> [(neighbour name, neighbour's end)]
        for a, b, _ in self.links:
            neighbours[a.node.name].append((b.node.name, b))
            neighbours[b.node.name].append((a.node.name, a))
        aggregate = {4: str(TEST_NETWORK), 6: str(TEST_NETWORK6)}
        routes = {}
        for name, node in self.nodes.items():
            if node.role != "router" and len(neighbours[name]) == 1:
                gateway_end = neighbours[name][0][1]
                routes[node.namespace] = [
                    (aggregate[ipaddress.ip_address(address).version], address) for address, _ in gateway_end.addresses
                ]
                continue
            first_hop = self._first_hops(name, neighbours)
            routes[node.namespace] = [
                (str(network), _same_family(first_hop[a.node.name].addresses, network))
                for a, b, networks in self.links
                if name not in (a.node.name, b.node.name) and a.node.name in first_hop
                for network in networks
            ]
        return routes

    @staticmethod
    def _first_hops(origin, neighbours):
        """{node name: the gateway address of the first hop from origin toward it} (breadth first)."""
        hops, queue = {}, collections.deque()
        for name, end in neighbours[origin]:
            if name not in hops:
                hops[name] = end
                queue.append(name)
        while queue:
            current = queue.popleft()
            for name, _ in neighbours[current]:
                if name != origin and name not in hops:
                    hops[name] = hops[current]
                    queue.append(name)
        return hops

    def _configure_endpoint(self, node, host):
        if host.cc:
            self._set_default_cc(node, host.cc)
        for ifname, _ in node.interfaces:
            key = f"{node.name}/{ifname}"
            if self._endpoint_offloads == "wire":
                # A real NIC segments TSO super-packets before the wire; a veth would hand them to the
                # router whole (a netem loss would then drop ~44 segments at once). With TSO off the
                # stack still builds large skbs (GSO, as on a real host) and segments them at the veth.
                self.offloads[key] = netlink.set_offloads(node.namespace, ifname, False, netlink.TSO_FEATURES)
            elif self._endpoint_offloads == "kernel":
                self.offloads[key] = netlink.get_offloads(node.namespace, ifname)
            else:
                self.offloads[key] = netlink.set_offloads(node.namespace, ifname, self._endpoint_offloads)

    def _set_default_cc(self, node, cc):
        """Make cc the namespace's default, or, where the host forbids it, the cc of every socket we open.

        Linux lets a non-initial namespace default only to algorithms in the host's
        net.ipv4.tcp_allowed_congestion_control (EPERM otherwise); a root process may still pick
        any algorithm per socket, which is what our workloads then do (recorded as socket_cc).
        """
        try:
            netlink.write_sysctls(node.namespace, {_CC_SYSCTL: cc})
        except LabError as exc:
            if "not permitted" not in str(exc):
                raise
            self.socket_cc[node.name] = cc

    # -- reading ------------------------------------------------------------------------------
    def interface_counters(self, ends):
        """{"name/ifname": counters} of the given ends."""
        return {end.key: netlink.interface_counters(end.node.namespace, end.ifname) for end in ends}

    def qdisc_stats(self, ends):
        """{ifname: [qdisc stats]} of the given (router) ends, one dump per namespace."""
        return _per_namespace(ends, netlink.qdisc_stats_of)

    def flow_queues(self, ends):
        """{ifname: per-flow queues its fq_codel lists now} of the given (router) ends."""
        return _per_namespace(ends, netlink.flow_queues_of)

    def changing_ends(self):
        """[(end, way)] of the ends whose way changes while a flow runs (a Schedule on their link)."""
        return [
            (end, rules[0][1]) for end, rules in self._shaping.items() if rules[0][0] is None and rules[0][1].changes
        ]

    def seed_of(self, end):
        """The netem seed of the qdiscs on end (named by its key, the same on every run), or None."""
        return None if self.seed is None else netlink.netem_seed(self.seed, end.key)

    def _check_seeds(self):
        """Read every netem back: a kernel that dropped the seed would draw unseeded, unseen."""
        held = self.qdisc_stats(list(self._shaping))
        for end in self._shaping:
            if any(q["kind"] == "netem" and q["settings"].get("seed") is None for q in held[end.ifname]):
                raise LabError(
                    f"netem on {end.key} holds no seed: this kernel ({os.uname().release}) ignored it (netem's seeded "
                    "generator, TCA_NETEM_PRNG_SEED, needs {netlink.NETEM_SEED_NEED})"
                )

    def _netlink_changes(self, group):
        return [(end.ifname, way, frame, self.seed_of(end)) for end, way, frame in group]

    def prepare_change(self, changes):
        """Encode change(changes)'s messages now, so they go out on time later."""
        for namespace, group in self._by_namespace(changes).items():
            netlink.prepare_change(namespace, self._netlink_changes(group))

    def timed_change(self, changes, first_seq):
        """change(changes) as messages for another process to send at its time: [(fd, bytes, [seq, ...])], one per
        router, sequence numbers from first_seq on."""
        messages = []
        for namespace, group in self._by_namespace(changes).items():
            fd, data, seqs = netlink.timed_change(namespace, self._netlink_changes(group), first_seq)
            messages.append((fd, data, seqs))
            first_seq = seqs[-1] + 1
        return messages

    def read_back(self, changes):
        """{end key: settings} the kernel holds now for the ends of changes (after a timed change)."""
        done = {}
        for namespace, group in self._by_namespace(changes).items():
            settings = netlink.read_back_egress(namespace, [end.ifname for end, _, _ in group])
            done.update({end.key: settings[end.ifname] for end, _, _ in group})
        return done

    @staticmethod
    def _by_namespace(changes):
        by_namespace = collections.defaultdict(list)
        for end, way, frame_way in changes:
            by_namespace[end.node.namespace].append((end, way, frame_way))
        return by_namespace

    def change(self, changes):
        """Change ends' qdiscs in place: changes = [(end, way, frame_way)], each end (built for frame_way, a changing
        way) to `way`, one of its phases; one message per router. {end key: (acked_at, settings read back)}."""
        done = {}
        for namespace, group in self._by_namespace(changes).items():
            acked_at, settings = netlink.change_egress(namespace, self._netlink_changes(group))
            done.update({end.key: (acked_at, settings[end.ifname]) for end, _, _ in group})
        return done

    @property
    def shaped_ends(self):
        """Every end that has qdiscs, in the order they were described."""
        return list(self._shaping)

    def whole_way(self, end):
        """The OneWay that shapes everything leaving end, or None (unshaped, or shaped per match: a star's class)."""
        rules = self._shaping.get(end) or []
        return rules[0][1] if len(rules) == 1 and rules[0][0] is None else None

    # -- tearing down -------------------------------------------------------------------------
    def close(self):
        """Stop the processes of every node, then remove the namespaces (which removes the veths and qdiscs)."""
        if self.closed:
            return
        self.closed = True
        for node in self.nodes.values():
            node.closed = True
            node.processes.stop_all()
        try:
            netlink.remove_namespaces(self._created[::-1])
        except OSError as exc:
            raise LabError(f"teardown left namespaces behind: {exc}") from exc


class WorldView:
    """What a pair and a topology share: the world they are a view of, closed with it, a context manager."""

    world: World
    kind: str  # what the failure messages call it: "pair", "dumbbell", "star"

    @property
    def closed(self):
        """True once its world is closed."""
        return self.world.closed

    def close(self):
        """Tear the whole world down (a star's or dumbbell's other pairs with it)."""
        self.world.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def check_measurement(self, flows, *, capture, timeout):
        """What every measurement on this view checks before anything starts: ccs, tshark, the deadline, an open world."""
        for flow in flows:
            if getattr(flow, "cc", None) is not None:
                check_need(flow.cc)
        if capture is True or capture in ("client", "router", "server"):
            check_need("tshark")
        check_number("timeout", timeout, 0, low_open=True, must="a number of seconds > 0")
        if self.closed:
            raise LabError(f"this {self.kind} is closed")

    def _run(self, jobs, *, timeout=None, capture=False, sample_interval=None):
        """Check, then run the (pair, workload) jobs at once in one measurement slot: a WorkloadRun per job, its
        flows and its own results registered with the lab. timeout None: the longest of the workloads' own."""
        for _, workload in jobs:
            if not isinstance(workload, Workload):
                raise TypeError(
                    f"workload: expected an instance of a pytest_tcpnet.Workload subclass, got {type(workload).__name__}"
                )
        if timeout is None:
            defaults = [workload.default_timeout(pair.link) for pair, workload in jobs]
            if None in defaults:
                named = next(type(w).__name__ for (_, w), d in zip(jobs, defaults) if d is None)
                raise TypeError(f"timeout: {named} has no default_timeout(link); pass run(..., timeout=seconds)")
            timeout = max(defaults)
        self.check_measurement(
            [spec for _, workload in jobs for spec in workload.flow_specs()], capture=capture, timeout=timeout
        )
        lab = self.world.lab
        measured = run_workloads(
            jobs,
            timeout=timeout,
            sample_interval=sample_interval,
            capture=capture,
            artifact_dir=lab.artifact_dir,
            # A seeded lab's netem draws the next numbers of its sequence in a retake, so the kept take would not lose
            # the packets its seed promises (run 54's seeded-netem stage): its takes are never retaken.
            steal_retakes=lab.steal_retakes if lab.seed is None else 0,
        )
        runs = []
        for (pair, workload), take in zip(jobs, measured):
            # Its own results carry the kept take's counters and void takes too: a test that read the router's
            # cumulative counters around run() would count a void take's packets as well (CI run 55).
            own = with_take(
                workload.results(pair, take.flows),
                void_takes=take.void_takes,
                qdiscs=take.qdiscs,
                cpus_polled=take.cpus_polled,
            )
            own = lab.register(*own, by=f"{type(workload).__name__}.results()")
            runs.append(WorkloadRun(take.flows, own))
        return runs


def _ipv6_of(network):
    """The /64 of 2001:2::/48 that stands beside an IPv4 /24 of the plan (198.18.k.0 -> k, 198.19.k.0 -> 256 + k)."""
    k = (int(network.network_address) - int(TEST_NETWORK.network_address)) >> 8
    return ipaddress.IPv6Network((int(TEST_NETWORK6.network_address) + (k << 64), 64))


def _same_family(addresses, network):
    """The address of the family of `network` among an end's addresses."""
    return next(address for address, _ in addresses if ipaddress.ip_address(address).version == network.version)


def _per_namespace(ends, read):
    """{ifname: read(namespace, ifnames)[ifname]} over the ends, one read per namespace."""
    by_namespace = collections.defaultdict(list)
    for end in ends:
        by_namespace[end.node.namespace].append(end.ifname)
    found = {}
    for namespace, ifnames in by_namespace.items():
        found.update(read(namespace, ifnames))
    return found
