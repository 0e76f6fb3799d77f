"""Labs: worlds of network namespaces (a pair, a star, a dumbbell), built by one builder, and flows across them.

Usable without pytest: ``with Lab() as lab: lab.pair(link=Link(rate="50mbit")).transfer(nbytes=...)``.
"""

import atexit
import contextlib
import itertools
import threading
import weakref
from pathlib import Path

from .. import interrupts, netlink
from ..errors import LabError
from ..measure.run import DEFAULT_STEAL_RETAKES, TCP_SYSCTLS
from ..model import Host, HostLimit, Link
from ..model.validation import check_integer
from ..requirements import check_need
from ..results import REGISTERED_KINDS, with_shares
from ..workload.process import nsenter_path
from .node import Node
from .pair import Pair
from .presets import (
    MAX_DUMBBELL_PAIRS,
    MAX_STAR_SERVERS,
    Topology,
    check_count,
    describe_dumbbell,
    describe_pair,
    describe_star,
    per_pair,
)
from .world import FAMILIES, World

__all__ = ["Lab", "Pair", "Node", "World", "Topology", "TCP_SYSCTLS", "preflight"]

_sequence = itertools.count()
_open_labs: weakref.WeakSet = weakref.WeakSet()


def preflight(link, client, server):
    """Check privilege, tools, sysctls, congestion controls and qdiscs of a pair before anything is created."""
    for name, value, kind in (("link", link, Link), ("client", client, Host), ("server", server, Host)):
        if not isinstance(value, kind):
            raise TypeError(f"{name}: expected a {kind.__name__}, got {value!r}")
    check_world([link], {"client": client, "server": server})


def check_world(links, hosts):
    """The machine checks of a world's links and {role: Host}, before anything is created."""
    check_need("privilege")
    nsenter_path()
    for role, host in hosts.items():
        for key in host.sysctls:
            if not netlink.sysctl_exists(key):
                raise ValueError(f"{role}.sysctls: unknown sysctl {key} on kernel {netlink.kernel_release()}")
        if host.cc:
            check_need(host.cc)
    if any(w.rate_bps or w.police_bps for link in links for w in (link.toward_client, link.toward_server)):
        check_need("htb")
    ways = [w for link in links for w in (link.toward_client, link.toward_server)]
    if any(link.needs_netem for link in links):
        check_need("netem")
    for kind in sorted({w.queue.kind for w in ways if w.queue is not None}):
        check_need(kind)
    if any(w.police_bps for w in ways):
        check_need("police")


class Lab:
    """The worlds owned by this process; closing it tears every one down, newest first.

    endpoint_offloads: "wire" (default) makes the endpoints' veths behave like a real NIC on a
    wire: TSO off so only MTU-sized packets reach the router, GSO/GRO as the kernel set them;
    "kernel" keeps every veth offload as created; True/False forces all of them on or off.
    Whatever is chosen is recorded in each result's ``offloads``.

    artifact_dir: where results write their pcaps and plots (the ``tcpnet`` fixture gives each
    test its own, kept per ``--tcpnet-keep``); ``results`` lists every result the lab produced.

    steal_retakes: how many times a measurement beside hypervisor steal is void and taken again (measure.run; the
    plugin's ``--tcpnet-steal-retakes``; None: measure.run.DEFAULT_STEAL_RETAKES, 4; 0: never).

    idle_poll: while a measurement runs, ask the kernel to keep idle CPUs polling rather than halted
    (hostload.idle_cpus_polling: a PM QoS request held by an open file, gone when it closes; needs root), so a VM
    host's vCPUs do not wait for their hypervisor on every wake-up (the plugin's ``--tcpnet-idle-poll``).
    """

    def __init__(
        self,
        *,
        sweep=True,
        endpoint_offloads="wire",
        artifact_dir=None,
        seed=None,
        host_limit=None,
        steal_retakes=None,
        idle_poll=True,
    ):
        #: Every result this lab's pairs produced, in order (register): transfers, window probes, request/response
        #: runs, latency probes, UDP streams. The plugin reports each (table, JUnit, results file, artifacts).
        self.results = []
        #: Where results write pcaps and plots, a Path as docs/reports.md promises (None: nowhere until one is given).
        self.artifact_dir = None if artifact_dir is None else Path(artifact_dir)
        if endpoint_offloads not in ("wire", "kernel", True, False):
            raise ValueError(f"endpoint_offloads: must be 'wire', 'kernel', True or False, got {endpoint_offloads!r}")
        self._worlds = []
        self._pairs = []
        self._lock = threading.Lock()
        self._endpoint_offloads = endpoint_offloads
        #: The seed of every netem qdisc this lab builds (each derives its own from it, by world and interface), so
        #: a seeded lab loses the same packets on every run (Linux >= 6.6); None: the kernel seeds each at random.
        self.seed = None if seed is None else check_integer("seed", seed, 0)
        if host_limit is not None and not isinstance(host_limit, HostLimit):
            raise TypeError(f"host_limit: expected a model.HostLimit or None, got {host_limit!r}")
        #: What one unshaped flow of this host carries (model.HostLimit, e.g. calibrate.calibrate_host()): every
        #: result's "host" bound; None: no such bound.
        self.host_limit = host_limit
        #: How many times a measurement of this lab beside hypervisor steal is taken again (measure.run).
        self.steal_retakes = (
            DEFAULT_STEAL_RETAKES if steal_retakes is None else check_integer("steal_retakes", steal_retakes, 0)
        )
        if idle_poll not in (True, False):
            raise ValueError(f"idle_poll: must be True or False, got {idle_poll!r}")
        #: Whether its measurements keep the machine's idle CPUs polling (measure.slots.measuring).
        self.idle_poll = idle_poll
        self._worlds_built = 0
        self.closed = False
        interrupts.install()  # a Ctrl-C the interpreter drops is raised again by the lab's next wait
        if sweep and netlink.has_net_admin():
            netlink.sweep_stale_namespaces()
        _open_labs.add(self)

    def register(self, *results, by="register()"):
        """Keep results with the lab, the one place the session table, JUnit properties, results files and failure
        artifacts read them from; returns them. Only the kinds those report (results.REGISTERED_KINDS): anything
        else is a TypeError naming ``by``, before any is kept."""
        for result in results:
            if not isinstance(result, REGISTERED_KINDS):
                raise TypeError(
                    f"{by}: expected results of the kinds the plugin reports "
                    f"({', '.join(kind.__name__ for kind in REGISTERED_KINDS)}), got {type(result).__name__}; "
                    "a workload's own figures go in its FlowOutcomes' details (result.details)"
                )
        self.results.extend(results)
        return list(results)

    def share(self, flows, streams, bottleneck, *, what="the bottleneck"):
        """The flows (registered TransferResults that crossed `bottleneck` at once, beside UdpResult `streams`) each
        with its share of it (results.with_shares), registered in their place; returns them."""
        shared = with_shares(flows, streams, bottleneck, what=what)
        for old, new in zip(flows, shared):
            for i, registered in enumerate(self.results):
                if registered is old:
                    self.results[i] = new
        return shared

    def pair(self, link=None, client=None, server=None, *, family="ipv4"):
        """Build a client – router – server path: validated first, nothing is left behind on error.

        family: "ipv4", "ipv6" (2001:2::/48, the endpoints' addresses IPv6) or "dual" (both; IPv4
        the primary address, `node.addresses` has the IPv6 one too).
        """
        link = Link() if link is None else link
        client = Host() if client is None else client
        server = Host() if server is None else server
        _check_family(family)
        self._check_open()
        preflight(link, client, server)
        return self._build(lambda world, index: [describe_pair(world, index, link, client, server)], family)[0]

    def star(self, *, servers, links=None, client=None, family="ipv4"):
        """One client and n servers around one router, server i's traffic shaped by links[i] alone.

        servers: n, or a list of n Hosts; links: None (unshaped), one Link for every server, or
        a list of n (None entries unshaped); client: a Host. ``.pairs[i]`` is client <-> server i.
        family: as for pair().
        """
        n = len(servers) if isinstance(servers, (list, tuple)) else check_count("servers", servers, MAX_STAR_SERVERS)
        check_count("servers", n, MAX_STAR_SERVERS)
        servers = per_pair("servers", None if isinstance(servers, int) else servers, n, Host, Host())
        links = per_pair("links", links, n, Link, Link())
        client = _host("client", client)
        _check_family(family)
        self._check_open()
        check_world(links, {"client": client, **{f"servers[{i}]": h for i, h in enumerate(servers)}})
        return self._topology("star", lambda world, index: describe_star(world, index, client, servers, links), family)

    def dumbbell(self, n, *, bottleneck=None, access=None, clients=None, servers=None, family="ipv4"):
        """n clients behind a left router, n servers behind a right one, one shaped bottleneck between the routers.

        bottleneck: a Link (None: unshaped); access: None, one Link for every pair or a list of
        n (None entries: none), pair i's own hops, so flows can differ in rate, RTT and loss;
        clients/servers: None, one Host for all or a list of n. ``.pairs[i]`` is client i <->
        server i, each with the whole Pair interface; ``.concurrent(flows)`` runs them at once.
        family: as for pair().
        """
        n = check_count("n", n, MAX_DUMBBELL_PAIRS)
        bottleneck = Link() if bottleneck is None else bottleneck
        if not isinstance(bottleneck, Link):
            raise TypeError(f"bottleneck: expected a Link, got {bottleneck!r}")
        access = per_pair("access", access, n, Link, None)
        clients = per_pair("clients", clients, n, Host, Host())
        servers = per_pair("servers", servers, n, Host, Host())
        for i, link in enumerate(access):
            if link is not None:
                try:
                    Link.in_series(link, bottleneck)
                except ValueError as exc:
                    raise ValueError(f"access[{i}] with the bottleneck: {exc}") from None
        _check_family(family)
        self._check_open()
        check_world(
            [bottleneck, *(link for link in access if link is not None)],
            {
                **{f"clients[{i}]": h for i, h in enumerate(clients)},
                **{f"servers[{i}]": h for i, h in enumerate(servers)},
            },
        )
        return self._topology(
            "dumbbell",
            lambda world, index: describe_dumbbell(world, index, bottleneck, access, clients, servers),
            family,
            bottleneck=bottleneck,
        )

    def _topology(self, kind, describe, family, bottleneck=None):
        world_pairs = []
        self._build(lambda world, index: world_pairs.extend(describe(world, index)) or world_pairs, family)
        return Topology(world_pairs[0].world, world_pairs, kind, bottleneck)

    def _build(self, describe, family):
        """A new world described by describe(world, index) -> its pairs, built; registered with the lab."""
        index = next(_sequence)
        with self._lock:
            ordinal, self._worlds_built = self._worlds_built, self._worlds_built + 1
        # The seed by the world's place in this lab (not `index`, counted across every lab of the process).
        seed = None if self.seed is None else netlink.netem_seed(self.seed, ordinal)
        world = World(self, index, endpoint_offloads=self._endpoint_offloads, family=family, seed=seed)
        pairs = describe(world, index)
        world.build()
        with self._lock:
            self._worlds.append(world)
            self._pairs.extend(pairs)
        return pairs

    def _check_open(self):
        if self.closed:
            raise LabError("this lab is closed")

    @property
    def pairs(self):
        """The pairs built so far, of every world (closed ones included)."""
        return list(self._pairs)

    def close(self):
        """Tear down every world, newest first; report every failure, not just the first."""
        self.closed = True
        errors = []
        with self._lock:
            worlds, self._worlds = self._worlds[::-1], []
        for world in worlds:
            try:
                world.close()
            except Exception as exc:  # keep tearing down the others
                errors.append(str(exc))
        if errors:
            raise LabError("; ".join(errors))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def _check_family(family):
    if family not in FAMILIES:
        raise ValueError(f"family: must be one of {', '.join(repr(f) for f in FAMILIES)}, got {family!r}")


def _host(name, value):
    if value is None:
        return Host()
    if not isinstance(value, Host):
        raise TypeError(f"{name}: expected a Host, got {value!r}")
    return value


@atexit.register
def _close_forgotten_labs():
    """Last line of defence for scripts that never closed their lab (pytest closes it in fixtures)."""
    for lab in list(_open_labs):
        with contextlib.suppress(Exception):
            lab.close()
