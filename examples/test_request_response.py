"""Request/response and short flows: what a response's completion time is made of (issue 21, source 002).

Source 002 times a MySQL client fetching a 13 MB result set from a server whose send buffer is
32 KB: 3.1 s at 5 ms RTT and 0.84 s at 1 ms. The send buffer bounds what is in flight, so the
time scales with the RTT; the model says by how much (in flight / RTT per round).
"""

import pytest

from pytest_tcpnet import Host, Link

pytestmark = pytest.mark.tcpnet_needs("netem", "cubic")


@pytest.mark.parametrize("rtt", ["1ms", "5ms"])
def test_a_large_response_through_a_small_send_buffer_takes_rtt_bound_time(tcpnet, rtt):
    """Source 002's MySQL case: measures one 64-byte query answered by 13 MB from a server with SO_SNDBUF 32 KB
    on a 1 Gbit/s path of 1 and 5 ms RTT; asserts the response's completion time is within 25% of the model's
    (the send buffer's in-flight bytes per RTT) and that 5 ms takes > 2.5x as long as 1 ms (the test at 5 ms
    compares with a 1 ms run of its own)."""
    pair = tcpnet.pair(Link(rate="1gbit", rtt=rtt), server=Host(cc="cubic"))
    result = pair.requests(1, response_size=13_000_000, sndbuf="32kb")
    figures = result.describe()
    assert result.fct_s[0] == pytest.approx(result.expected_s[0], rel=0.25), figures
    if rtt == "5ms":
        near = tcpnet.pair(Link(rate="1gbit", rtt="1ms"), server=Host(cc="cubic")).requests(
            1, response_size=13_000_000, sndbuf="32kb")
        assert result.fct_s[0] > 2.5 * near.fct_s[0], f"{figures}\n1 ms:\n{near.describe()}"


def test_a_short_response_pays_its_handshake_and_slow_start_rounds(tcpnet):
    """Measures five 100 KB responses at 100 ms RTT, each on a new connection; asserts each one's completion time
    is within one RTT of the model's handshake + request + slow-start rounds (10, 20, 40 segments: 3 rounds for
    100 KB, ~400 ms in all), far above 100 KB's 8 ms on the 100 Mbit/s link."""
    pair = tcpnet.pair(Link(rate="100mbit", rtt="100ms"), server=Host(cc="cubic"))
    result = pair.requests(5, response_size=100_000, new_connection=True)
    figures = result.describe()
    for measured, expected in zip(result.fct_s, result.expected_s):
        assert abs(measured - expected) <= 0.100, figures
    assert min(result.fct_s) >= 0.3, figures
