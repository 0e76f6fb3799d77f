"""C5: a rate-only link is filled to its rate (htb, no delay). Runs on any kernel with htb."""

from pytest_tcpnet import Link, assert_throughput_within


def test_link_rate(tcpnet):
    result = tcpnet.pair(link=Link(rate="50mbit")).transfer(nbytes=20_000_000)
    # Goodput carries 1448 payload bytes per 1514-byte frame the shaper counts (95.6%).
    assert_throughput_within(result, 50e6 * 1448 / 1514, rel=0.08)
