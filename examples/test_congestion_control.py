"""C15: on a long fat path with random loss, model-based congestion control (bbr) far outruns loss-based (cubic).

Source: 1 Gbit/s, 210 ms RTT, occasional loss: iperf3 with cubic averaged 69.6 Mbit/s with a
sawtooth cwnd and 101 retransmits in 30 s; raising buffers did not help; bbr reached
102 Mbit/s with 6 retransmits and a stable cwnd. iperf3 must run over TCP to see it.

Here: 100 Mbit/s, 100 ms RTT, 1% loss each way (the VM carries this rate; its ceiling is
~0.6 Gbit/s). Measured by hand in the VM: cubic 259 KB/s, bbr 5520 KB/s (21x). cubic's
share follows the Mathis bound (MSS / RTT x 1.22 / sqrt(p) = 1.7 Mbit/s here); bbr does not
back off on random loss, so no loss bound applies to it.
"""

import pytest

from pytest_tcpnet import Link, assert_faster, model

LOSSY_LFN = Link(rate="100mbit", rtt="100ms", loss="1%")


@pytest.mark.tcpnet_needs("netem", "iperf3", "bbr")
def test_bbr_is_several_times_faster_than_cubic_under_random_loss(tcpnet):
    """iperf3 -C bbr vs -C cubic, 4 s each, interleaved; the comparison decides over repeated trials.

    Asserted: bbr at least 3x cubic (a factor far below the 21x measured, so the verdict is
    about the mechanism, not the exact figure); assert_faster repeats interleaved trials until
    the 95% interval of the ratio is clear of 3x (2-6 trials); retransmits reported for both.
    """
    pair = tcpnet.pair(link=LOSSY_LFN)
    trials = assert_faster(lambda: pair.iperf3(duration=4, cc="bbr"), lambda: pair.iperf3(duration=4, cc="cubic"),
                           factor=3, label_a="bbr", label_b="cubic")
    for trial in trials:
        assert trial.a.cc == "bbr" and trial.b.cc == "cubic"
        assert trial.a.retransmits is not None and trial.b.retransmits is not None
        assert trial.a.details["intervals"] and trial.b.details["intervals"]


@pytest.mark.tcpnet_needs("netem", "iperf3")
def test_cubic_stays_near_the_mathis_bound(tcpnet):
    """cubic under 1% random loss at 100 ms is loss-bound: its goodput stays within a few times Mathis' estimate.

    Mathis: 1448 B x 8 / 0.1 s x 1.22 / sqrt(0.01) = 1.41 Mbit/s; the hand-measured 259 KB/s
    is 2.07 Mbit/s (1.5x: cubic grows faster than Reno between losses). Asserted: between
    0.3x and 4x the bound, so far below the 100 Mbit/s link that the loss, not the link, binds.
    """
    result = tcpnet.pair(link=LOSSY_LFN).iperf3(duration=4, cc="cubic")
    bound = model.mathis_throughput(1448, 0.100, 0.01)
    assert 0.3 * bound <= result.throughput_bps <= 4 * bound, result.describe()
    assert result.retransmits > 0
