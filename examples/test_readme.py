"""The two tests the README opens with, verbatim."""

import pytest

from pytest_tcpnet import Host, Link, assert_throughput_within


@pytest.mark.tcpnet_needs("netem")                 # delay needs sch_netem (or --tcpnet-vm)
def test_tiny_receive_buffer_is_window_limited(tcpnet):
    pair = tcpnet.pair(link=Link(rate="100mbit", rtt="40ms"),
                       client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}),
                       server=Host())
    r = pair.transfer(nbytes=100_000)          # server -> client ("download")
    assert r.throughput_bps < 0.01 * 100e6     # the window, not the link, limits it


def test_link_rate(tcpnet):
    r = tcpnet.pair(link=Link(rate="50mbit")).transfer(nbytes=20_000_000, sndbuf=None)
    assert_throughput_within(r, 50e6, rel=0.15)
