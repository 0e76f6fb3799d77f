"""IPv6 worlds (2001:2::/48) against the real kernel: addresses without DAD, routes, every workload, the model."""

import os
import sys

import pytest
from pyroute2 import IPRoute

from pytest_tcpnet import Flow, Lab, Link, assert_throughput_within, model, netlink

pytestmark = pytest.mark.tcpnet_needs("privilege")

USERAPP = os.path.join(os.path.dirname(__file__), "userapp.py")


def _addresses(namespace, family):
    with IPRoute(netns=namespace) as ipr:
        return sorted(
            a.get_attr("IFA_ADDRESS")
            for a in ipr.get_addr(family=family)
            if a.get_attr("IFA_ADDRESS") not in ("127.0.0.1", "::1") and a["scope"] == 0
        )


def test_an_ipv6_pair_is_addressed_from_the_benchmarking_prefix_without_dad(tcpnet):
    pair = tcpnet.pair(family="ipv6")
    assert (pair.client.address, pair.router.address, pair.server.address) == (
        "2001:2::2",
        "2001:2::1",
        "2001:2:0:100::2",
    )
    assert _addresses(pair.client.namespace, 10) == ["2001:2::2"] and _addresses(pair.client.namespace, 2) == []
    assert _addresses(pair.router.namespace, 10) == ["2001:2:0:100::1", "2001:2::1"]
    # Usable at once: the global addresses are added without DAD, so a connection works the moment the pair
    # exists. (The kernel's own link-local address skips DAD too, accept_dad 0, but its work item may still
    # read "tentative" for an instant after the link came up: seen once in four runs under -n 2.)
    shown = pair.client.run(["ip", "-6", "addr", "show", "dev", "veth-rtr"], check=True).stdout
    global_line = next(line for line in shown.splitlines() if "2001:2::2/64" in line)
    assert "nodad" in global_line and "tentative" not in global_line, shown
    out = pair.client.run(
        [sys.executable, "-c", "import socket; socket.create_connection(('2001:2:0:100::2', 9), 2)"], timeout=10
    )
    assert "ConnectionRefusedError" in out.stderr, out.stderr
    assert netlink.read_sysctls(pair.router.namespace, ["net.ipv6.conf.all.forwarding"]) == {
        "net.ipv6.conf.all.forwarding": "1"
    }


def test_an_ipv6_pair_carries_its_payload_rate_and_the_model_knows_the_longer_header(tcpnet):
    # 20 Mbit/s x 1428/1514 = 18.86 Mbit/s of payload (IPv4: 1448, 19.13): the model reads the family
    # from the flow's addresses. Measured: 18.86 Mbit/s (1.000x), the same session's IPv4 19.08.
    pair = tcpnet.pair(link=Link(rate="20mbit"), family="ipv6")
    result = pair.transfer(duration=3.0)
    assert ":" in result.sender.local[0]
    expected = model.link_goodput(20e6, model.PAYLOAD_PER_FRAME_IPV6)
    assert abs(result.throughput_bps - expected) <= 0.06 * expected, result.describe()
    prediction = model.expected_throughput(result)
    assert prediction.bps == pytest.approx(expected, rel=1e-3) and "1428 payload bytes" in prediction.why, (
        prediction.why
    )
    assert_throughput_within(result, rel=0.06)
    # Sampled from both ends over IPv6 sockets.
    assert result.series("snd_cwnd") and result.series("rcv_space", side="receiver")


@pytest.mark.tcpnet_needs("iperf3", "curl", "tshark")
def test_every_workload_and_observe_run_over_ipv6(tcpnet):
    pair = tcpnet.pair(link=Link(rate="50mbit"), family="ipv6")
    iperf = pair.iperf3(duration=1)
    curl = pair.http_download(2_000_000)
    both = pair.concurrent([Flow(nbytes=1_000_000), Flow(nbytes=1_000_000, direction="upload")])
    assert all(r.throughput_bps > 0 and ":" in r.sender.local[0] for r in (iperf, curl, *both.flows))
    captured = pair.transfer(1_000_000, capture=True)
    assert captured.capture.data_segments > 0 and captured.capture.point == "server/veth-rtr"
    pair.server.popen([sys.executable, USERAPP, "serve", pair.server.address, "9000"])
    with pair.observe(capture=True) as seen:
        pair.client.run([sys.executable, USERAPP, "get", pair.server.address, "9000", "2000000"], check=True)
    assert len(seen.flows) == 1 and seen.flows[0].nbytes == 2_000_000, [f.describe() for f in seen.flows]
    assert seen.flows[0].capture.data_segments > 0


def test_a_dual_stack_pair_speaks_both_families(tcpnet):
    pair = tcpnet.pair(link=Link(rate="20mbit"), family="dual")
    assert pair.server.address == "198.19.0.2" and pair.server.addresses == ["198.19.0.2", "2001:2:0:100::2"]
    for address in pair.server.addresses:
        out = pair.client.run(
            [sys.executable, "-c", f"import socket; socket.create_connection(('{address}', 9), 2)"], timeout=10
        )
        assert "ConnectionRefusedError" in out.stderr, (address, out.stderr)
    assert "." in pair.transfer(200_000).sender.local[0]  # IPv4 is the primary family


def test_an_ipv6_star_shapes_each_server_and_an_ipv6_dumbbell_routes_every_pair(tcpnet):
    star = tcpnet.star(servers=2, links=[Link(rate="8mbit"), Link(rate="40mbit")], family="ipv6")
    filters = star.nodes["hub"].run(["tc", "filter", "show", "dev", "veth-client"], check=True).stdout
    assert "match 20010002/ffffffff at 8" in filters and filters.count("protocol ipv6") >= 2, filters
    result = star.concurrent([Flow(duration=2.0), Flow(duration=2.0)])
    for rate, got in zip((8e6, 40e6), result.rates_between(0.5, 2.0)):
        expected = model.link_goodput(rate, model.PAYLOAD_PER_FRAME_IPV6)
        assert abs(got - expected) <= 0.10 * expected, result.describe()
    bell = tcpnet.dumbbell(3, bottleneck=Link(rate="30mbit"), family="ipv6")
    assert [p.server.address for p in bell.pairs] == ["2001:2:0:100::2", "2001:2:0:101::2", "2001:2:0:102::2"]
    assert all(r.nbytes == 300_000 for r in bell.concurrent([Flow(nbytes=300_000)] * 3).flows)


def test_a_family_other_than_ipv4_ipv6_dual_is_refused_before_anything_exists():
    with Lab() as lab:
        for call in (
            lambda: lab.pair(family="ipv5"),
            lambda: lab.star(servers=2, family=6),
            lambda: lab.dumbbell(2, family="inet6"),
        ):
            with pytest.raises(ValueError, match="family: must be one of 'ipv4', 'ipv6', 'dual'"):
                call()
        assert lab.pairs == []
