"""Thin presets over the one builder: a pair, a star (one client, n servers), a dumbbell (n pairs, one bottleneck).

Each validates everything first (nothing exists until it is all known good), describes its
world with World.host/router/connect/shape, and hands back Pairs over it.
"""

from ..model import Link
from ..model.validation import check_integer
from ..workload.base import Workload
from ..workload.methods import TopologyWorkloads
from .pair import Pair, check_observe_options
from .world import WorldView

__all__ = ["Topology", "describe_pair", "describe_star", "describe_dumbbell", "MAX_DUMBBELL_PAIRS", "MAX_STAR_SERVERS"]

#: The address plan: client i's link is 198.18.i.0/24, server i's 198.19.i.0/24, the routers'
#: link 198.18.255.0/24; so at most 255 clients (198.18.0-254) and 256 servers (198.19.0-255).
MAX_DUMBBELL_PAIRS = 255
MAX_STAR_SERVERS = 256


def describe_pair(world, index, link, client, server):
    """client – router – server, the link shaped on the router's two egresses; the Pair."""
    c, r, s = world.host("client", "client", client), world.router("router"), world.host("server", "server", server)
    r_c, c_end = world.connect(r, c, subnet="198.18.0.0/24", ifnames=("veth-cli", "veth-rtr"))
    r_s, s_end = world.connect(r, s, subnet="198.19.0.0/24", ifnames=("veth-srv", "veth-rtr"))
    world.shape(r_c, link.toward_client)
    world.shape(r_s, link.toward_server)
    return Pair(world, index, c, s, link, [c_end, r_c, r_s, s_end], [r_c, r_s])


def describe_star(world, index, client, servers, links):
    """One client and n servers around one router ("hub"); server i's traffic crosses links[i] only.

    Toward server i: the hub's egress to it. Toward the client: the hub's one egress to the
    client, where packets from server i go through a class of their own (a u32 match on the
    source address), so each server's link shapes its own traffic and nothing else.
    """
    c, hub = world.host("client", "client", client), world.router("hub")
    hub_c, c_end = world.connect(hub, c, subnet="198.18.0.0/24", ifnames=("veth-client", "veth-hub"))
    pairs = []
    for i, (spec, link) in enumerate(zip(servers, links)):
        s = world.host(f"s{i}", "server", spec)
        hub_s, s_end = world.connect(hub, s, subnet=f"198.19.{i}.0/24", ifnames=(f"veth-s{i}", "veth-hub"))
        world.shape(hub_s, link.toward_server)
        shaped = [hub_s]
        if not link.toward_client.is_unimpaired:
            world.shape(hub_c, link.toward_client, match=[{"src": address} for address, _ in s_end.addresses])
            shaped.insert(0, hub_c)
        pairs.append(Pair(world, index, c, s, link, [c_end, hub_c, hub_s, s_end], shaped))
    return pairs


def describe_dumbbell(world, index, bottleneck, access, clients, servers):
    """n clients behind a left router, n servers behind a right one, the bottleneck between the routers.

    Access link i shapes pair i's own hops, on router egresses as every link: toward client i
    on the left router, toward server i on the right one (each hop carries pair i's traffic
    only, so where along the path it is applied changes no flow's rate or RTT).
    """
    left, right = world.router("left"), world.router("right")
    l_r, r_l = world.connect(left, right, subnet="198.18.255.0/24", ifnames=("veth-right", "veth-left"))
    world.shape(l_r, bottleneck.toward_server)
    world.shape(r_l, bottleneck.toward_client)
    pairs = []
    for i in range(len(clients)):
        c, s = world.host(f"c{i}", "client", clients[i]), world.host(f"s{i}", "server", servers[i])
        l_c, c_end = world.connect(left, c, subnet=f"198.18.{i}.0/24", ifnames=(f"veth-c{i}", "veth-left"))
        r_s, s_end = world.connect(right, s, subnet=f"198.19.{i}.0/24", ifnames=(f"veth-s{i}", "veth-right"))
        shaped = [l_r, r_l]
        link = bottleneck
        if access[i] is not None:
            world.shape(l_c, access[i].toward_client)
            world.shape(r_s, access[i].toward_server)
            shaped = [l_c, l_r, r_l, r_s]
            link = Link.in_series(access[i], bottleneck)
        pairs.append(Pair(world, index, c, s, link, [c_end, l_c, l_r, r_l, r_s, s_end], shaped))
    return pairs


def per_pair(name, value, n, kind, default):
    """None, one `kind` for every pair, or a list of n of them (None entries: the default)."""
    if value is None or isinstance(value, kind):
        return [value if value is not None else default] * n
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{name}: expected None, a {kind.__name__} or a list of {n}, got {value!r}")
    if len(value) != n:
        raise ValueError(f"{name}: expected {n} entries (one per pair), got {len(value)}")
    for i, item in enumerate(value):
        if item is not None and not isinstance(item, kind):
            raise TypeError(f"{name}[{i}]: expected a {kind.__name__} or None, got {item!r}")
    return [default if item is None else item for item in value]


def check_count(name, n, most):
    return check_integer(name, n, 1, most, must=f"an int in 1..{most} (the address plan's limit)")


class Topology(TopologyWorkloads, WorldView):
    """A star or dumbbell: its pairs (`.pairs[i]`, each a whole Pair), flows on all of them at once, teardown."""

    def __init__(self, world, pairs, kind, bottleneck=None):
        self.world = world
        self.pairs = list(pairs)
        self.kind = kind
        #: The Link every pair crosses (a dumbbell's), whose share each flow is owed; None: no link is shared.
        self.bottleneck = bottleneck

    @property
    def nodes(self):
        """{name: Node} of every namespace of the world."""
        return dict(self.world.nodes)

    def router_qdisc_stats(self):
        """{ifname: [qdisc stats]} of every shaped router interface of the world."""
        return self.world.qdisc_stats(self.world.shaped_ends)

    def run(self, workloads, *, timeout=None, capture=False, sample_interval=None):
        """Run workloads[i] (a Workload, or None for none) on pair i, all at once in one measurement slot, each
        measured as Pair.run measures one; a WorkloadRun per pair in pair order (None for an idle pair). On a
        dumbbell each flow has its share of the bottleneck, as concurrent()'s do. timeout None: the longest of
        the workloads' own default_timeout(link)."""
        jobs = self._per_pair("workloads", workloads, Workload, "a Workload")
        runs = self._run_shared(jobs, timeout=timeout, capture=capture, sample_interval=sample_interval)
        by_pair = {id(pair): run for (pair, _), run in zip(jobs, runs)}
        return [by_pair.get(id(pair)) for pair in self.pairs]

    def _per_pair(self, name, items, kind, words):
        """[(pair, item)] of items[i] (a `kind`, or None for none) on pair i; the errors name `name`."""
        items = list(items)
        if len(items) != len(self.pairs):
            raise ValueError(
                f"{name}: expected {len(self.pairs)} entries (one per pair, None to leave one idle), got {len(items)}"
            )
        for i, item in enumerate(items):
            if item is not None and not isinstance(item, kind):
                raise TypeError(f"{name}[{i}]: expected {words} or None, got {item!r}")
        jobs = [(pair, item) for pair, item in zip(self.pairs, items) if item is not None]
        if not jobs:
            raise ValueError(f"{name}: every entry is None; nothing to run")
        return jobs

    def _run_shared(self, jobs, **options):
        """WorldView._run, and on a dumbbell every flow of every pair with its share of the bottleneck they crossed
        at once (the rate check and the model then judge each against its share, not the whole link)."""
        runs = self._run(jobs, **options)
        if self.bottleneck is None:
            return runs
        flows = [flow for run in runs for flow in run.flows]
        shared = iter(self.world.lab.share(flows, [], self.bottleneck))
        return [run._replace(flows=[next(shared) for _ in run.flows]) for run in runs]

    def observe(self, *, capture=False, sample_interval=None, app_window=None):
        """Measure whatever runs on every pair inside the block, as pair.observe() measures one: ``seen.flows`` holds
        each connection between a pair's client and server once, largest first; on a dumbbell each flow that ran
        beside others has its share of the bottleneck."""
        from ..measure.observe import TopologyObservation

        app_window = check_observe_options(capture, app_window)
        return TopologyObservation(
            self.pairs,
            capture=capture,
            sample_interval=sample_interval,
            app_window_bytes=app_window,
            bottleneck=self.bottleneck,
        )

    def __repr__(self):
        return f"<{self.kind} of {len(self.pairs)} pairs: " + "; ".join(p.link.describe() for p in self.pairs[:4]) + ">"
