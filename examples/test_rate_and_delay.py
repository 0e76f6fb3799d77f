"""C6/C7: on a long fat path the receive buffer, not the link, sets the rate until it covers the BDP.

Source figures: htb 1000 mbit + netem 50 ms: default buffers 38.7 MB/s (link not filled);
BDP = 1 Gbit/s x 50 ms = 6.25 MB, tcp_rmem = 2 x BDP (the window is half the buffer with
tcp_adv_win_scale 1) -> 115 MB/s, the link filled. The VM carries ~0.6 Gbit/s at most, so
these tests keep the source's BDP-to-buffer ratios at 100 Mbit/s x 50 ms (BDP 625 KB): a
6 MB autotuning ceiling becomes 600 KB, 2 x BDP becomes 1.25 MB.
"""

import pytest

from pytest_tcpnet import Host, Link, assert_throughput_within, model

LINK = Link(rate="100mbit", rtt="50ms")
BDP = model.bdp(100e6, 0.050)  # 625 kB


@pytest.mark.tcpnet_needs("netem")
def test_default_style_buffers_leave_the_link_unfilled(tcpnet):
    """C6 (source: 1 Gbit/s, 50 ms, default buffers -> 38.7 MB/s of 125): measures an 8 MB download whose
    receiver may autotune up to 600 KB (the source's 6 MB scaled with the BDP); asserts the goodput is
    the model's receive-window bound (half of 600 KB per 50 ms on 6.1) within tolerance, below the link."""
    client = Host(sysctls={"net.ipv4.tcp_rmem": (4096, 131072, int(BDP * 6_291_456 / 6_250_000))})
    result = tcpnet.pair(link=LINK, client=client).transfer(8_000_000)
    prediction = model.expected_throughput(result)
    assert prediction.bound == "rwnd" and prediction.bps < 0.8 * model.link_goodput(100e6)
    # CALIBRATION
    assert_throughput_within(result, rel=0.25)


@pytest.mark.tcpnet_needs("netem")
def test_bdp_sized_buffers_fill_the_link(tcpnet):
    """C7 (source: tcp_rmem = 2 x BDP -> 115 MB/s, the link filled): measures an 8 MB download with
    tcp_rmem pinned at 2 x BDP (1.25 MB) on the receiver; asserts the model says link-bound and the
    goodput is within tolerance of the link's payload rate."""
    client = Host(sysctls={"net.ipv4.tcp_rmem": (4096, 131072, int(2 * BDP))})
    result = tcpnet.pair(link=LINK, client=client).transfer(8_000_000)
    assert model.expected_throughput(result).bound == "link"
    # CALIBRATION
    assert_throughput_within(result, rel=0.25)


@pytest.mark.tcpnet_needs("netem")
def test_a_64k_receive_buffer_cannot_fill_a_long_fat_link(tcpnet):
    """C7 from the other side: measures a 1 MB download with SO_RCVBUF 32 KB (64 KB after doubling) on the
    same path; asserts the goodput is the model's window / RTT bound (~5 Mbit/s) within ±25%."""
    result = tcpnet.pair(link=LINK).transfer(1_000_000, rcvbuf=32768)
    prediction = model.expected_throughput(result)
    assert prediction.bound == "rwnd" and prediction.bps < 0.1 * 100e6
    # CALIBRATION
    assert_throughput_within(result, rel=0.25)
