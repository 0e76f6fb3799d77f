"""Stars and dumbbells from the one builder, against the real kernel: wiring, per-destination shaping, sharing."""

import sys

import pytest
from pyroute2 import IPRoute

from pytest_tcpnet import Flow, Host, Lab, LabError, Link, model, netlink
from pytest_tcpnet.assertions.verdicts import judge_trials
from pytest_tcpnet.results import jain_index

pytestmark = pytest.mark.tcpnet_needs("privilege")


def _routes(namespace):
    with IPRoute(netns=namespace) as ipr:
        return sorted(
            (r.get_attr("RTA_DST"), r["dst_len"], r.get_attr("RTA_GATEWAY"))
            for r in ipr.get_routes(family=2, table=254)
        )


def _ours():
    """This process's namespaces (other xdist workers create theirs concurrently)."""
    tag = netlink.PREFIX + netlink.owner_tag() + "-"
    return {n for n in netlink.lab_namespaces() if n.startswith(tag)}


def _reaches(node, address):
    """True when a TCP SYN from node to address:9 is answered (RST: the server is there, port 9 closed)."""
    out = node.run([sys.executable, "-c", f"import socket; socket.create_connection(('{address}', 9), 2)"], timeout=10)
    return "ConnectionRefusedError" in out.stderr


def test_a_dumbbell_is_ten_namespaces_addressed_and_routed_by_the_plan(tcpnet):
    bell = tcpnet.dumbbell(4, bottleneck=Link(rate="100mbit"))
    names = sorted(bell.nodes)
    assert names == ["c0", "c1", "c2", "c3", "left", "right", "s0", "s1", "s2", "s3"]
    assert len({node.namespace for node in bell.nodes.values()}) == 10
    for i, pair in enumerate(bell.pairs):
        assert (pair.client.address, pair.server.address) == (f"198.18.{i}.2", f"198.19.{i}.2")
        assert [node.name for node in pair.nodes] == [f"c{i}", "left", "right", f"s{i}"]
        # A host sends the test network to its router and nothing else (no default route).
        assert _routes(pair.client.namespace) == [("198.18.0.0", 15, f"198.18.{i}.1"), (f"198.18.{i}.0", 24, None)]
    left = _routes(bell.nodes["left"].namespace)
    assert [(dst, gateway) for dst, _, gateway in left if gateway] == [
        (f"198.19.{i}.0", "198.18.255.2") for i in range(4)
    ]
    assert netlink.read_sysctls(bell.nodes["right"].namespace, ["net.ipv4.ip_forward"]) == {"net.ipv4.ip_forward": "1"}
    # Every client reaches its own server through both routers, and the others' too (one network).
    assert all(_reaches(pair.client, pair.server.address) for pair in bell.pairs)
    assert _reaches(bell.pairs[0].client, bell.pairs[3].server.address)
    # The bottleneck is shaped both ways, on the routers' egresses only.
    shaper = f"htb rate 100000000bit burst {netlink.htb_burst_bytes(100e6)}b"  # 4 ms of the rate: 50000b
    assert bell.pairs[2].qdisc_plan == {
        "veth-right": [shaper, "pfifo limit 1000"],
        "veth-left": [shaper, "pfifo limit 1000"],
    }
    assert sorted(bell.router_qdisc_stats()) == ["veth-left", "veth-right"]


def test_a_dumbbell_and_a_star_tear_down_without_a_trace():
    before = _ours()
    with Lab() as lab:
        bell = lab.dumbbell(2, bottleneck=Link(rate="10mbit"), access=Link(rate="5mbit"))
        star = lab.star(servers=3, links=Link(rate="20mbit"))
        made = {node.namespace for node in [*bell.nodes.values(), *star.nodes.values()]}
        assert made <= _ours() and len(made) == 6 + 5
    assert _ours() == before
    with pytest.raises(LabError, match="closed"):
        bell.pairs[0].transfer(1000)


def test_a_failed_star_build_leaves_nothing(monkeypatch):
    # The hub's classes are installed after every namespace and veth exists: all of it must go.
    before = _ours()

    def broken(*args, **kwargs):
        raise LabError("injected failure")

    monkeypatch.setattr(netlink, "shape_egress_classes", broken)
    with Lab() as lab, pytest.raises(LabError, match="injected failure"):
        lab.star(servers=2, links=Link(rate="10mbit"))
    assert _ours() == before


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda lab: lab.dumbbell(0), r"n: must be an int in 1\.\.255"),
        (lambda lab: lab.dumbbell(256), r"n: must be an int in 1\.\.255"),
        (lambda lab: lab.dumbbell(True), r"n: must be an int"),
        (lambda lab: lab.dumbbell(2, access=[Link()]), r"access: expected 2 entries"),
        (lambda lab: lab.dumbbell(2, clients=[Host(), "x"]), r"clients\[1\]: expected a Host"),
        (lambda lab: lab.dumbbell(2, bottleneck="10mbit"), r"bottleneck: expected a Link"),
        (
            lambda lab: lab.dumbbell(2, bottleneck=Link(rtt="10ms", gap=5), access=Link(rtt="10ms", gap=3)),
            r"access\[0\] with the bottleneck: gap: set on 2 links",
        ),
        (lambda lab: lab.star(servers=0), r"servers: must be an int in 1\.\.256"),
        (lambda lab: lab.star(servers=257), r"servers: must be an int in 1\.\.256"),
        (lambda lab: lab.star(servers=2, links=[Link()] * 3), r"links: expected 2 entries"),
        (lambda lab: lab.star(servers=[Host()], client="bbr"), r"client: expected a Host"),
        (lambda lab: lab.star(servers=2, links=[Link(), Link(to_server={"loss": "150%"})]), r"to_server\.loss"),
    ],
)
def test_bad_topologies_are_refused_before_anything_is_created(call, message):
    before = _ours()
    with Lab() as lab:
        with pytest.raises((ValueError, TypeError), match=message):
            call(lab)
        assert _ours() == before


def test_three_cubic_flows_share_a_30mbit_dumbbell_bottleneck_fairly_and_fill_it(tcpnet):
    # Queue: 60 packets. The default 1000 (400 ms at 30 Mbit/s) is the whole RTT on the host, and
    # there one flow can hold most of it (DESIGN pitfall 8; a pair's two flows measured Jain 0.67 on it).
    # Judged on seconds 2-16 of 16 s flows, a majority of up to 3 trials. Seconds 1-4 of 4 s flows gave Jain
    # 0.969-0.999 in 5 quiet runs (queues of 30 and 150 packets: 0.913-0.998, 0.957-1.000), but 0.855-0.994
    # beside a CPU hog in fresh-clone CI run ci34 (two of three trials under 0.9): three seconds of cubic
    # sawtooth through a FIFO are too few to average the flows' phases out. Seconds 2-8 of 8 s flows read
    # 0.968-1.000 quiet and 0.960-0.997 beside a hog in 4 runs each, until fresh-clone run 32 read 0.878, 0.888
    # and 0.953 on a quiet host (one flow 14 Mbit/s beside two of 6-8, with half their losses), and 12 more runs
    # here 0.922-0.998. Seconds 2-16 of the same flows: 0.981-0.997 quiet, 0.960-0.996 beside a CPU hog on both
    # cores (6 runs each); sum 0.999-1.001.
    bell = tcpnet.dumbbell(3, bottleneck=Link(rate="30mbit", limit=60), clients=Host(cc="cubic"))
    payload = model.link_goodput(30e6)

    def fair_and_full(result):
        steady = result.rates_between(2.0, 16.0)
        return jain_index(steady) >= 0.9 and 0.85 * payload <= sum(steady) <= 1.03 * payload

    passed, results, verdicts = judge_trials(
        lambda: bell.concurrent([Flow(duration=16.0, cc="cubic")] * 3), fair_and_full, trials=3
    )
    report = "\n".join(
        f"trial {i + 1} ({'ok' if ok else 'failed'}): steady (2-16 s) "
        f"{[round(r / 1e6, 2) for r in result.rates_between(2.0, 16.0)]} Mbit/s, "
        f"sum {sum(result.rates_between(2.0, 16.0)) / payload:.3f} of the payload rate, "
        f"Jain {jain_index(result.rates_between(2.0, 16.0)):.3f}\n{result.describe()}"
        for i, (result, ok) in enumerate(zip(results, verdicts))
    )
    assert passed, report
    # Each flow's result names its own path and pair, as a pair's transfer's does.
    result = results[-1]
    assert [f.link for f in result.flows] == [bell.pairs[i].link for i in range(3)]
    assert [f.cc for f in result.flows] == ["cubic"] * 3
    assert {f.qdiscs["veth-right"][0]["kind"] for f in result.flows} == {"htb"}


def test_an_access_link_limits_its_own_flow_behind_a_wider_bottleneck(tcpnet):
    """The 10 Mbit/s access link sets its flow's rate (within 10%) and the other flow takes the rest of the 100 Mbit/s
    bottleneck. On a 0 ms path bbr keeps about 15-25 kB in flight (two of its near-zero BDPs plus quanta): 12-20 ms
    of the access link, so a sender that waits longer for a CPU leaves the link idle. Beside half a CPU or more used
    outside the session, the access-bound rate is judged only as never above its link, and the load must be named
    (CI run 71, beside two spinners: 8.47 Mbit/s over 0.5-3.0 s against 9.56, no retransmission, 100 ms intervals
    at 6-7 Mbit/s from 1 s on, 0.9 CPUs outside; it passed beside the hog in 12 other host and rootless stages)."""
    bell = tcpnet.dumbbell(2, bottleneck=Link(rate="100mbit"), access=[Link(rate="10mbit"), None])
    assert bell.pairs[0].link.rate_bps == 10e6 and bell.pairs[1].link.rate_bps == 100e6
    result = bell.concurrent([Flow(duration=3.0), Flow(duration=3.0)])
    limited, free = result.rates_between(0.5, 3.0)
    expected = model.link_goodput(10e6)
    if result.beside_busy_host:
        assert limited <= 1.02 * expected and "host: other processes kept" in result.describe(), result.describe()
    else:
        assert abs(limited - expected) <= 0.10 * expected, result.describe()
    # The other flow had the rest of the bottleneck: far more than the access link allows.
    assert free > 5 * expected, result.describe()
    # The model sees pair 0's path as its access link and the bottleneck in series.
    prediction = model.expected_throughput(result.flows[0])
    assert prediction.bound == "link" and abs(prediction.bps - expected) < 0.01 * expected, prediction.why


def test_a_star_shapes_each_servers_traffic_by_its_own_link(tcpnet):
    # Per destination: the hub's one egress toward the client holds a class per server (u32 on the
    # source address), so the 8 Mbit/s server cannot slow the 80 Mbit/s one down, nor the reverse.
    star = tcpnet.star(servers=2, links=[Link(rate="8mbit"), Link(rate="80mbit")])
    filters = star.nodes["hub"].run(["tc", "filter", "show", "dev", "veth-client"], check=True).stdout
    assert "match c6130002/ffffffff at 12" in filters and "match c6130102/ffffffff at 12" in filters, filters
    result = star.concurrent([Flow(duration=3.0), Flow(duration=3.0)])
    for rate, got in zip((8e6, 80e6), result.rates_between(0.5, 3.0)):
        expected = model.link_goodput(rate)
        assert abs(got - expected) <= 0.10 * expected, f"{rate / 1e6:g} Mbit/s link:\n{result.describe()}"
    # Each pair alone too, with the whole Pair interface (transfer): the link alone sets each rate.
    for pair, rate in zip(star.pairs, (8e6, 80e6)):
        alone = pair.transfer(duration=2.0)
        assert abs(alone.throughput_bps - model.link_goodput(rate)) <= 0.10 * model.link_goodput(rate), alone.describe()
    # Unmatched traffic (the hub's own, ARP) is not shaped: htb's direct queue.
    stats = star.router_qdisc_stats()["veth-client"]
    assert [q["kind"] for q in stats].count("pfifo") == 2


def test_a_star_s_shared_client_is_sampled_once_for_all_its_pairs(tcpnet):
    """Three downloads from three servers to one client at once: one sampler thread reads the client's namespace for
    all three pairs (not one per pair), so the three flows' client-side samples were taken at the same instants; each
    pair's view still holds its own server's sockets only."""
    star = tcpnet.star(servers=3, links=Link(rate="20mbit"))
    result = star.concurrent([Flow(duration=1.5) for _ in range(3)])
    instants = []
    for pair, flow in zip(star.pairs, result.flows):
        rows = flow.samples.rows[("client", tuple(flow.receiver.local), tuple(flow.receiver.remote))]
        instants.append({t for t, _ in rows})
        servers = {local[0] for role, local, _ in flow.samples.sockets("server") if role == "server"}
        assert servers == {pair.server.address}, servers
    # While all three connections existed (they start apart: 0.4 s each in a one-CPU guest), the samples of one are
    # the samples of the others (but a row the kernel's record of a closing socket adds); with a sampler per pair
    # none coincide.
    first, last = max(map(min, instants)), min(map(max, instants))
    during = [{t for t in times if first <= t <= last} for times in instants]
    common = set.intersection(*during)
    assert len(common) >= 10 and len(common) >= 0.9 * max(map(len, during)), [len(common), *map(len, during)]


@pytest.mark.tcpnet_needs("iperf3")
def test_a_link_scoped_to_a_port_impairs_that_ports_traffic_only(tcpnet):
    # Link(ports=[5201]): htb classes on the router's egresses whose u32 filters match TCP port 5201 as
    # source or destination; everything else leaves through htb's direct queue, unshaped.
    pair = tcpnet.pair(link=Link(rate="5mbit", ports=[5201]))
    filters = pair.router.run(["tc", "filter", "show", "dev", "veth-cli"], check=True).stdout
    assert filters.count("flowid 1:1") == 2 and "match 14510000/ffff0000 at 20" in filters, filters
    scoped = pair.iperf3(duration=2)  # iperf3's port, 5201
    free = pair.transfer(duration=1.0)  # an ephemeral port
    expected = model.link_goodput(5e6)
    assert abs(scoped.throughput_bps - expected) <= 0.10 * expected, scoped.describe()
    assert free.throughput_bps > 20 * expected, free.describe()
    # The model sees the link each flow met: 5 Mbit/s for port 5201, nothing for the other.
    assert model.expected_throughput(scoped).bound == "link"
    assert model.expected_throughput(free).bound != "link"
    assert "TCP port 5201 only" in scoped.link.describe()


def test_bad_ports_are_refused_before_anything_is_created():
    before = _ours()
    for ports, message in (([], "an empty list"), ([0], "1..65535"), ([70000], "1..65535"), ("5201", "a list")):
        with pytest.raises((ValueError, TypeError), match=f"ports: .*{message}"):
            Link(rate="5mbit", ports=ports)
    with pytest.raises(ValueError, match="ports: the link impairs nothing"):
        Link(ports=[80])
    with Lab() as lab, pytest.raises(ValueError, match="access\\[0\\] with the bottleneck: ports"):
        lab.dumbbell(1, bottleneck=Link(rate="10mbit"), access=Link(rate="5mbit", ports=[80]))
    assert _ours() == before
