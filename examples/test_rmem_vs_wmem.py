"""C3/C9: a tiny receive buffer on the client hurts far more than a tiny send buffer on the server.

Receive space freed by the application needs a round trip to reach the sender; send space is
freed as soon as ACKs arrive. A capture at the sender shows why: "TCP Window Full" after every
segment or two when the client's rmem is tiny, hardly ever when only the server's wmem is.
"""

import pytest

from pytest_tcpnet import Capture, Host, Link, assert_faster, assert_no_window_full, assert_window_full

TINY_RMEM = {"net.ipv4.tcp_rmem": "4096 4096 4096"}
TINY_WMEM = {"net.ipv4.tcp_wmem": "4096 4096 4096"}
# Tuned: the client's receive buffer starts at 1 MB, far above the path's BDP.
TUNED_RMEM = {"net.ipv4.tcp_rmem": "4096 1048576 6291456"}


def test_client_rmem_hurts_more_than_server_wmem(tcpnet):
    """Measured on 6.18: 0.32 vs 4.7 Gbit/s (15x) quiet. "Several times" is the claim: ask for 3x, over interleaved
    trials (assert_faster: two, more while unclear). Both flows are unshaped, so each is as fast as the CPU lets
    it be: beside a CPU hog and another test session one pair of them read 0.39 vs 1.1 Gbit/s (2.9x; fresh-clone
    CI run ci45), the tiny send buffer's sender waiting for a CPU at every wake-up. Beside two hogs single trials
    read 2.6-14.1x and the interleaved verdict passed 3 of 3 (after 3, 6 and 4 trials)."""
    tiny_rmem = tcpnet.pair(client=Host(sysctls=TINY_RMEM))
    tiny_wmem = tcpnet.pair(server=Host(sysctls=TINY_WMEM))
    assert_faster(
        lambda: tiny_wmem.transfer(nbytes=50_000_000),
        lambda: tiny_rmem.transfer(nbytes=20_000_000),
        factor=3,
        label_a="server wmem 4096",
        label_b="client rmem 4096",
    )


def _window_full_at_sender(tcpnet, client, server, nbytes=100_000):
    pair = tcpnet.pair(link=Link(rtt="10ms"), client=Host(sysctls=client), server=Host(sysctls=server))
    with Capture(pair.server) as cap:
        pair.transfer(nbytes=nbytes)
    return cap.result


@pytest.mark.tcpnet_needs("netem", "tshark")
def test_window_full_comes_from_the_receiver_not_the_sender(tcpnet):
    # Measured in the 6.1 VM at 10 ms (200 KB): client rmem 4096 -> 136 Window Full in 274
    # data segments, both 4096 -> 216 in 274, server wmem only -> 0 in 139, tuned -> 0.
    rmem = _window_full_at_sender(tcpnet, TINY_RMEM, {})
    both = _window_full_at_sender(tcpnet, TINY_RMEM, TINY_WMEM)
    wmem = _window_full_at_sender(tcpnet, {}, TINY_WMEM)
    tuned = _window_full_at_sender(tcpnet, TUNED_RMEM, {})
    # "Window Full after one or two packets": at least one segment in four fills the window.
    assert_window_full(rmem, at_least=rmem.data_segments // 4)
    assert_window_full(both, at_least=both.data_segments // 4)
    assert wmem.events["window_full"] * 4 < rmem.events["window_full"], wmem.describe()
    assert_no_window_full(tuned)
