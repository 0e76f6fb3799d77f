"""C6/C7: at 100 Mbit/s and 50 ms the link needs a 625 KB window; a 64 KB receive buffer cannot fill it."""

import pytest

from pytest_tcpnet import Link, model


@pytest.mark.tcpnet_needs("netem")
def test_small_receive_buffer_cannot_fill_a_long_fat_link(tcpnet):
    link = Link(rate="100mbit", rtt="50ms")
    assert model.bdp(100e6, 0.050) == 625_000
    limited = tcpnet.pair(link=link).transfer(nbytes=2_000_000, rcvbuf=32_768)  # 64 KB after doubling
    # The window, at most the 64 KB buffer, bounds the rate to well under the link's.
    assert limited.throughput_bps < model.window_limited_throughput(65_536, 0.050) * 1.1
    assert limited.throughput_bps < 0.2 * 100e6
