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
    (64 KB charged, writes of 32 KB) on a 1 Gbit/s path of 1 and 5 ms RTT. Asserts: the completion time is at
    least the model's at the configured RTT (a lower bound: the endpoints add their own time to each round);
    at 5 ms from 0.95x to 2x the model at the RTT the server's connection saw (its srtt after each write, averaged:
    the sender's own wake-up to refill its buffer each round is not in it, and beside a CPU hog it grows; not the
    final srtt, which two late rounds at the end put at 5.88 ms, 0.91x, in UML 6.12 and a CPU hog at 32.4 ms against
    a 5.75 ms mean). UML 6.1 and 6.12 side by side: 1.018-1.038x quiet, 1.001-1.152x beside two CPU hogs (24 runs). The two RTTs are not
    compared with each other: the 1 ms case is CPU-bound in the emulated guest (5 ms took 3.1x as long as 1 ms on
    an earlier machine, 1.37x on a slower one, quiet: 1.33 s, 78 Mbit/s, against 1.82 s; fresh-clone CI run
    ci48), so each is judged against its own model. Measured in the 6.1 VM: at 1 ms 0.436,
    0.441, 0.439 s quiet (srtt model 0.35-0.37 s: ~0.8 of the charged buffer is payload in flight, a truesize
    law the model lacks) and 0.65-0.71 s beside a CPU hog (the guest then cannot move 240 Mbit/s: CPU, not
    window; so 1 ms is not judged against the srtt model); at 5 ms 1.35 s quiet (within 15%), 1.52 s and 2.58 s
    beside a hog (srtt models 1.20 and 1.71 s: +26% and +51%, the latter in fresh-clone CI run ci46); the ratio
    3.1x quiet, 2.3x beside the hog. Source 002 (MySQL, with its
    own per-row work): 0.84 s and 3.1 s."""
    pair = tcpnet.pair(Link(rate="1gbit", rtt=rtt), server=Host(cc="cubic"))
    result = pair.requests(1, response_size=13_000_000, sndbuf="32kb")
    figures = result.describe()
    assert result.fct_s[0] >= 0.95 * result.expected_s[0], figures
    if rtt == "5ms":
        assert 0.95 * result.observed_expected_s[0] <= result.fct_s[0] <= 2 * result.observed_expected_s[0], figures


def test_a_short_response_pays_its_handshake_and_slow_start_rounds(tcpnet):
    """Measures five 100 KiB responses at 100 ms RTT, each on a new connection; asserts each one's completion time
    is within one RTT of the model's handshake + request + slow-start rounds (10, 20, 40, then the 71st segment:
    4 rounds, ~500 ms in all), far above 100 KiB's 8.6 ms on the 100 Mbit/s link. 100 KiB, not 100 kB: 100,000 B
    is 69.1 segments, exactly what 3 rounds hold (10 + 20 + 40 = 70), so one ACK the receiver delays costs a
    whole round (511 against 405 ms, once in five, in the VM); 102,400 B needs a 4th round either way."""
    pair = tcpnet.pair(Link(rate="100mbit", rtt="100ms"), server=Host(cc="cubic"))
    result = pair.requests(5, response_size="100kb", new_connection=True)
    figures = result.describe()
    for measured, expected in zip(result.fct_s, result.expected_s):
        assert abs(measured - expected) <= 0.100, figures
    assert min(result.fct_s) >= 0.4, figures
