"""Beyond one pair (source 001's per-destination delay; RTT unfairness through one bottleneck).

Source 001: "delay the traffic to one IP only" —
    tc qdisc add dev eth0 root handle 1: prio
    tc filter add dev eth0 parent 1:0 protocol ip pref 55 handle ::55 u32 match ip dst 172.31.65.30 flowid 2:1
    tc qdisc add dev eth0 parent 1:1 handle 2: netem delay 17ms
A star does that: server i's traffic crosses links[i] alone (docs/topologies.md). The source then
gives up on "delay for one IP address and port" as too hard; Link(ports=[...]) does it.
"""

import pytest

from pytest_tcpnet import Flow, Host, Link

pytestmark = pytest.mark.tcpnet_needs("netem")


def test_delay_for_one_destination_only(tcpnet):
    """Source 001's `u32 match ip dst ... netem delay 17ms`: measures a 1 MB upload to each of two servers
    of a star whose first server's link delays what goes to it by 17 ms; asserts the flow to it sees a
    minimum RTT of 17 ms (+ at most 4 ms of the path's own) and the flow to the other under 4 ms."""
    star = tcpnet.star(servers=2, links=[Link(to_server={"delay": "17ms"}), None])
    # 1 MB: min_rtt is a minimum over round trips, and a 200 KB flow gives only a handful of them.
    delayed, direct = (pair.transfer(1_000_000, direction="upload") for pair in star.pairs)
    assert 0.017 <= delayed.min_rtt_s < 0.021, delayed.describe()
    assert direct.min_rtt_s < 0.004, direct.describe()


@pytest.mark.tcpnet_needs("iperf3")
def test_delay_for_one_port_only(tcpnet):
    """Source 001's "IP and port" it could not do: measures iperf3 (TCP port 5201) and a bulk flow (an
    ephemeral port) on a path whose 20 ms of RTT applies to port 5201 alone; asserts iperf3's flow sees
    a minimum RTT of 20 ms (+ at most 4) and the other one under 4 ms."""
    pair = tcpnet.pair(link=Link(rtt="20ms", ports=[5201]))
    delayed, direct = pair.iperf3(duration=1), pair.transfer(1_000_000)
    assert 0.020 <= delayed.min_rtt_s < 0.024, delayed.describe()
    assert direct.min_rtt_s < 0.004, direct.describe()


def test_a_near_flow_takes_more_of_a_shared_bottleneck_than_a_far_one(tcpnet):
    """RTT unfairness: measures two cubic downloads at once through one 20 Mbit/s bottleneck (30-packet queue,
    18 ms) from servers 10 ms and 80 ms of RTT away (access links); asserts each flow's minimum RTT is its
    path's and the near flow gets at least 1.5x the far one's goodput over seconds 2-8 (cubic grows its
    window per round trip, and the near flow's rounds are several times shorter)."""
    # The queue matters: it adds the same wait to both RTTs and so evens them out. Beside a CPU hog in
    # the emulated guest, 3 runs each: 30 packets gave 4.2-6.6x (srtt 25-41 vs 86 ms); 100 packets
    # (60 ms) 1.4-2.3x (srtt 59-69 vs 82-86 ms), too close to the claim to judge it.
    bell = tcpnet.dumbbell(
        2,
        bottleneck=Link(rate="20mbit", limit=30),
        access=[Link(rtt="10ms"), Link(rtt="80ms")],
        servers=Host(cc="cubic"),
    )
    result = bell.concurrent([Flow(duration=8.0, cc="cubic"), Flow(duration=8.0, cc="cubic")])
    near, far = result.flows
    assert 0.010 <= near.min_rtt_s < 0.014 and 0.080 <= far.min_rtt_s < 0.084, result.describe()
    near_bps, far_bps = result.rates_between(2.0, 8.0)
    assert near_bps >= 1.5 * far_bps, (
        f"near {near_bps / 1e6:.2f} vs far {far_bps / 1e6:.2f} Mbit/s\n{result.describe()}"
    )
