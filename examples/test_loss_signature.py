"""C2: random loss shows in the capture as resent segments and duplicate ACKs at about the loss rate.

Same buffers as the source (client tcp_rmem, server tcp_wmem 4096), 2 ms RTT, loss on the data
direction only; the capture is taken at the sender, as Wireshark's analysis expects.
"""

import pytest

from pytest_tcpnet import Capture, Host, Link, assert_loss_signature

TINY_RMEM = Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"})
TINY_WMEM = Host(sysctls={"net.ipv4.tcp_wmem": "4096 4096 4096"})


def _captured_download(tcpnet, loss, nbytes):
    pair = tcpnet.pair(link=Link(rtt="2ms", to_client={"loss": loss}), client=TINY_RMEM, server=TINY_WMEM)
    with Capture(pair.server) as cap:
        pair.transfer(nbytes=nbytes)
    return cap.result


@pytest.mark.tcpnet_needs("netem", "tshark")
def test_resends_and_dup_acks_follow_the_loss_rate(tcpnet):
    # Measured in the 6.1 VM: 1% loss -> resent 1.3%, dup acks 1.4% of 1388 data segments;
    # 10% -> resent 9.7%, dup acks 7.9% of 455 (the source: dup ack 0.63% / 5%, retransmission
    # 0.5% / 1.9%, out-of-order 0.12% / 3%). Factor 3 either way covers the Poisson spread of
    # ~14 and ~45 losses (sd 27% and 15%) with room; the two rates grow ~5x or more with the loss.
    low = _captured_download(tcpnet, 0.01, 1_000_000)
    high = _captured_download(tcpnet, 0.10, 250_000)
    assert_loss_signature(low, 0.01, factor=3)
    assert_loss_signature(high, 0.10, factor=3)
    for kind in ("duplicate_ack",):
        assert high.rate(kind) > 3 * low.rate(kind), (low.describe(), high.describe())
    assert high.resent_segments / high.data_segments > 3 * low.resent_segments / low.data_segments
