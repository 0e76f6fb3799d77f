"""The bottleneck's queue as users meet it: bufferbloat, AQM, ECN marks instead of drops, a policer (issue 21).

bufferbloat.net measured 150-250 ms of added latency under load through a deep FIFO, against
+4-8 ms with fq_codel. These run in the pinned-kernel VM (fq_codel, netem and police are not on
this host); each queue sits after netem's delay line, so a packet's delay and its queueing add up.
"""

import pytest

from pytest_tcpnet import Flow, Host, Link

pytestmark = pytest.mark.tcpnet_needs("netem", "fq_codel", "cubic")

PAYLOAD_10MBIT = 10e6 * 1448 / 1514  # what a 10 Mbit/s shaper carries of a cubic flow's payload


@pytest.mark.parametrize("queue", ["pfifo", "fq_codel"])
def test_a_deep_fifo_bloats_the_rtt_and_fq_codel_does_not(tcpnet, queue):
    """Measures a TCP request/response probe every 10 ms on a 10 Mbit/s, 20 ms path, idle for 1 s and then for 8 s
    beside one cubic download, through a 500-packet pfifo and through fq_codel; asserts the idle RTT is the
    path's (within 15% of 20 ms), the load adds > 150 ms at p95 through the FIFO and < 30 ms through fq_codel
    (the probe is a flow of its own there, served before the bulk flow's queue), and the download carries
    >= 85% of the payload rate through both."""
    pair = tcpnet.pair(Link(rate="10mbit", rtt="20ms", queue=queue, limit=500 if queue == "pfifo" else None),
                       server=Host(cc="cubic"))
    result = pair.latency_under_load(duration=8, flows=[Flow(duration=8, cc="cubic")], idle=1.0)
    figures = result.describe()
    assert abs(result.idle_rtt_s - 0.020) <= 0.15 * 0.020, figures
    induced = result.induced_latency_s(95)
    if queue == "pfifo":
        assert induced > 0.150, figures
    else:
        assert induced < 0.030, figures
    assert result.flows.total_bps >= 0.85 * PAYLOAD_10MBIT, figures


@pytest.mark.tcpnet_needs("codel")
def test_ecn_marks_replace_drops(tcpnet):
    """Measures a 5 s cubic download through codel with ECN at 10 Mbit/s and 20 ms, both hosts asking for ECN
    (net.ipv4.tcp_ecn=1); asserts the queue marked packets, the sender learnt of them (TCP_INFO delivered_ce)
    and retransmitted at most 2 segments: the marks did what drops would have."""
    ecn = Host(sysctls={"net.ipv4.tcp_ecn": 1}, cc="cubic")
    pair = tcpnet.pair(Link(rate="10mbit", rtt="20ms", queue="codel", ecn=True), client=ecn, server=ecn)
    result = pair.transfer(duration=5, cc="cubic", capture=True)
    figures = result.describe() + f"\nECE {result.events['ece']}, CWR {result.events['cwr']}"
    assert result.queue_ecn_marks > 0 and result.ce_marks > 0, figures
    assert result.events["cwr"] > 0, figures
    assert result.retransmits <= 2, figures


@pytest.mark.tcpnet_needs("police")
def test_a_cubic_flow_through_a_policer(tcpnet):
    """Measures a 6 s cubic download through a 10 Mbit/s policer (no shaper, a 100 Mbit/s path, 20 ms, the
    default bucket of 10 ms of the rate) against the same flow through a 10 Mbit/s shaper; asserts the policer
    drops (it queues nothing), and the policed flow still gets >= 85% of 10 Mbit/s."""
    pair = tcpnet.pair(Link(police="10mbit", rtt="20ms"), server=Host(cc="cubic"))
    result = pair.transfer(duration=6, cc="cubic")
    figures = result.describe()
    assert result.emulator_drops > 0, figures
    assert result.throughput_bps >= 0.85 * 10e6, figures
