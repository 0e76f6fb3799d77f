"""The README's examples, verbatim (a README snippet that stops working fails here)."""

import os
import sys

import pytest

from pytest_tcpnet import (  # noqa: F401  (the README's own import)
    Flow,
    Host,
    Link,
    Pace,
    Pause,
    Schedule,
    assert_follows_schedule,
    assert_limited_by,
    assert_no_window_full,
    assert_throughput_within,
    assert_window_full,
    model,
)


@pytest.mark.tcpnet_needs("netem")  # delay needs sch_netem (or --tcpnet-vm)
def test_tiny_receive_buffer_is_window_limited(tcpnet):
    pair = tcpnet.pair(
        link=Link(rate="100mbit", rtt="40ms"),
        client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}),
        server=Host(),
    )
    r = pair.transfer(nbytes=100_000)  # server -> client ("download")
    assert r.throughput_bps < 0.01 * 100e6  # the window, not the link, limits it


def test_link_rate(tcpnet):
    r = tcpnet.pair(link=Link(rate="50mbit")).transfer(nbytes=20_000_000, sndbuf=None)
    assert_throughput_within(r, 50e6, rel=0.15)


MYAPP = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "userapp.py")


@pytest.mark.tcpnet_needs("tshark")
def test_my_client_fills_the_link(tcpnet):  # MYAPP: your program's path
    pair = tcpnet.pair(link=Link(rate="40mbit"))
    pair.server.popen([sys.executable, MYAPP, "serve", pair.server.address, "9000"])
    with pair.observe(capture=True) as seen:  # every TCP connection on the path
        pair.client.run([sys.executable, MYAPP, "get", pair.server.address, "9000", "10000000"], check=True)
    assert_throughput_within(seen.flows[0], rel=0.15)  # the model's value, from the real sockets


def test_each_pair_gets_its_access_rate(tcpnet):
    bell = tcpnet.dumbbell(
        2, bottleneck=Link(rate="100mbit"), access=[Link(rate="10mbit"), Link(rate="30mbit")]
    )  # pair i's own hops
    result = bell.concurrent([Flow(duration=2), Flow(duration=2)])  # flows[i] on pair i, at once
    slow, fast = result.rates_between(0.5, 2)
    assert fast > 2 * slow


def test_one_destination_slowed(tcpnet):  # source 001's per-destination tc, as a star
    star = tcpnet.star(servers=2, links=[Link(rate="5mbit"), None])
    assert star.pairs[0].transfer(1_000_000).throughput_bps < 5e6 < star.pairs[1].transfer(5_000_000).throughput_bps


def test_the_flow_follows_a_rate_drop_and_recovery(tcpnet):
    link = Link(rate=Schedule([(0, "40mbit"), (2, "10mbit"), (4, "40mbit")]))  # or Schedule.from_mahimahi(path)
    result = tcpnet.pair(link).transfer(duration=6, cc="cubic")
    assert_follows_schedule(result, rel=0.12)  # each phase, after settling, against the model's rate
    assert [phase.link.rate_bps for phase in result.phases] == [40e6, 10e6, 40e6]


@pytest.mark.tcpnet_needs("iperf3", "curl")
def test_workloads(tcpnet):
    pair = tcpnet.pair(link=Link(rate="50mbit"))
    bulk = pair.transfer(2_000_000, sndbuf="64kb", rcvbuf="64kb")  # bytes, or duration=seconds
    paced = pair.transfer(20_000, reader=Pace(chunk=1024, per_second=20))  # C4's slow reader
    paused = pair.transfer(3_000_000, reader=Pause(after=500_000, seconds=0.5))  # C14
    starved = pair.transfer(1_000_000, starve_receiver=True)  # C10: nice 19 + a CPU hog
    two = pair.concurrent([Flow(duration=1, cc="reno"), Flow(duration=1, cc="reno", start=0.2)])
    iperf = pair.iperf3(duration=1, cc="reno")  # libiperf via the bindings
    curl = pair.http_download(500_000, limit_rate="1m")  # curl --limit-rate
    assert paced.throughput_bps / 8 < 25 * 1024 and two.jain_index > 0
    assert all(r.throughput_bps > 0 for r in (bulk, paused, starved, iperf, curl))


def test_what_a_result_measures(tcpnet):
    r = tcpnet.pair(link=Link(rate="20mbit")).transfer(2_000_000)
    assert r.limited_by == "cwnd" and r.effective_rcvbuf > 0
    assert max(cwnd for _, cwnd in r.series("snd_cwnd")) >= 10
    assert len(r.rate_series(0.1)) >= 5


@pytest.mark.tcpnet_needs("tshark")
def test_window_full(tcpnet):
    tiny = tcpnet.pair(client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}))
    assert_window_full(tiny.transfer(500_000, capture=True), at_least=50)
    tuned = tcpnet.pair(client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 1048576 4194304"}))
    assert_no_window_full(tuned.transfer(500_000, capture=True))


def test_against_the_model(tcpnet):
    r = tcpnet.pair(link=Link(rate="50mbit")).transfer(5_000_000)
    assert_throughput_within(r, rel=0.1)  # no expected value: the model's, from the conditions
    assert_limited_by(r, "cwnd")
