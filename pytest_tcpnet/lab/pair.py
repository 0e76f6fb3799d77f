"""A client – server pair of a world: run(workload) and observe() measure what runs on one (its workload methods,
transfer() and the rest, come from workload/methods.py)."""

import math

from ..requirements import check_need
from ..workload.methods import PairWorkloads
from .world import WorldView

__all__ = ["Pair"]


class Pair(PairWorkloads, WorldView):
    """A client and a server of a world and the path between them; every workload and observe() run on one.

    The two-host world of Lab.pair() is one; so is each client-server pair of a star or a
    dumbbell (their pairs share routers and, in a star, the client). `link` is the path as the
    model sees it: the links it crosses, in series (Link.in_series).
    """

    kind = "pair"

    def __init__(self, world, index, client, server, link, ends, shaped):
        self.world = world
        self.lab = world.lab
        self.index = index
        self.client = client
        self.server = server
        self.link = link
        self._ends = list(ends)  # every veth end the path crosses, client to server
        self._shaped = list(shaped)  # the ends whose qdiscs the path's packets cross
        self.routers = tuple(dict.fromkeys(end.node for end in self._ends if end.node.role == "router"))

    @property
    def client_host(self):
        """The client's Host spec."""
        return self.world.hosts[self.client.name]

    @property
    def server_host(self):
        """The server's Host spec."""
        return self.world.hosts[self.server.name]

    @property
    def router(self):
        """The first router from the client (the only one of a plain pair)."""
        return self.routers[0]

    @property
    def nodes(self):
        """(client, routers..., server)."""
        return (self.client, *self.routers, self.server)

    @property
    def offloads(self):
        """{"node/ifname": {feature: enabled}} of the path's interfaces, as the build left them."""
        return {end.key: self.world.offloads[end.key] for end in self._ends if end.key in self.world.offloads}

    @property
    def qdisc_plan(self):
        """{ifname: [what was installed]} of the path's shaped interfaces."""
        return {end.ifname: self.world.qdisc_plan[end.ifname] for end in self._shaped}

    @property
    def socket_cc(self):
        """{role: cc} the endpoints' Hosts asked for but their namespaces could not default to (set per socket)."""
        return {
            role: self.world.socket_cc[node.name]
            for role, node in (("client", self.client), ("server", self.server))
            if node.name in self.world.socket_cc
        }

    def interface_counters(self):
        """{"node/ifname": counters} for every veth end along the path."""
        return self.world.interface_counters(self._ends)

    @property
    def shaped_ways(self):
        """{ifname: (direction, OneWay)} of the path's interfaces one way shapes whole: what each was asked to do,
        for checking what it did (a router end after its veth peer sends toward the client, one before toward the
        server)."""
        ways = {}
        for end in self._shaped:
            way = self.world.whole_way(end)
            if way is not None:
                ways[end.ifname] = ("toward_client" if self._ends.index(end) % 2 else "toward_server", way)
        return ways

    def flow_queue_counts(self):
        """{ifname: per-flow queues listed now} of the path's shaped interfaces that queue per flow with fq_codel
        ({} where none does)."""
        ends = [end for end in self._shaped if _queue_kind(self.world.whole_way(end)) == "fq_codel"]
        return self.world.flow_queues(ends) if ends else {}

    def router_qdisc_stats(self):
        """{ifname: [qdisc stats]} of the path's shaped router interfaces, cumulative since they were built (around a
        measurement they count its void takes too: its results' own deltas are their `qdiscs`)."""
        return self.world.qdisc_stats(self._shaped)

    def run(self, workload, *, timeout=None, capture=False, sample_interval=None):
        """Run a Workload, yours or the plugin's, on this pair and measure it as every workload method here is
        measured (docs/workloads.md, "Your own adapter"): a WorkloadRun of its connections' TransferResults and
        its own results, all registered with the lab (session table, results file, failure artifacts).

        timeout: seconds from the measurement's start until the workload must be done (a LabError then, every
        process it started stopped); None: the workload's own default_timeout(link), which yours must then give.
        capture and sample_interval: as for transfer().
        """
        return self._run([(self, workload)], timeout=timeout, capture=capture, sample_interval=sample_interval)[0]

    def observe(self, *, capture=False, sample_interval=None, app_window=None):
        """Measure whatever runs on this pair inside the block: your own programs, started with popen/run/spawn/call.

        ``with pair.observe() as seen: ...`` holds a measurement slot, samples TCP_INFO and socket
        memory of every TCP socket in the client and server namespaces (both ends, matched by
        4-tuple), reads the path's counters before and after and, with capture=True, captures
        at both ends. Afterwards ``seen.flows`` holds one TransferResult per connection between
        the two ends, largest first, registered with the lab (session table, results files,
        failure artifacts) and accepted by every assertion; each one's capture is the one taken
        at the end that sent its data. docs/your-application.md says what sampling can miss.
        app_window: your protocol's own bound, if it has one (bytes, or "16kb"): what it keeps
        outstanding per application round trip (a stop-and-wait protocol's chunk per ACK); the
        model then predicts that bound where it binds, instead of the network's alone.
        """
        from ..measure.observe import Observation

        app_window = check_observe_options(capture, app_window)
        return Observation(self, capture=capture, sample_interval=sample_interval, app_window_bytes=app_window)

    def __repr__(self):
        return (
            f"<Pair #{self.index} {self.link!r} client={self.client_host.describe()} "
            f"server={self.server_host.describe()}>"
        )


def check_observe_options(capture, app_window):
    """observe()'s options checked before anything starts; returns app_window in bytes (or None)."""
    from ..model.units import parse_size

    if capture not in (False, True):
        raise ValueError(
            f"capture: must be True or False (both ends are captured; each connection gets the "
            f"capture of the end that sent its data), got {capture!r}"
        )
    if app_window is not None:
        app_window = parse_size(app_window, "app_window")
        if not (math.isfinite(app_window) and app_window >= 1):
            raise ValueError(f"app_window: must be at least 1 byte (or None: no bound of its own), got {app_window!r}")
        app_window = int(app_window)
    if capture:
        check_need("tshark")
    return app_window


def _queue_kind(way):
    """The queue kind a whole way was asked for (None: no way, or the default FIFO)."""
    return None if way is None or way.queue is None else way.queue.kind
