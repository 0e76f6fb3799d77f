"""The bottleneck's queue as users meet it: bufferbloat, AQM, ECN marks instead of drops, a policer (issue 21).

bufferbloat.net measured 150-250 ms of added latency under load through a deep FIFO, against
+4-8 ms with fq_codel. These run in the pinned-kernel VM (fq_codel, netem and police are not on
this host); each queue sits after netem's delay line, so a packet's delay and its queueing add up.
"""

import statistics

import pytest

from pytest_tcpnet import Flow, Host, Link
from pytest_tcpnet.model import expected_throughput

pytestmark = pytest.mark.tcpnet_needs("netem", "fq_codel", "cubic")

PAYLOAD_10MBIT = 10e6 * 1448 / 1514  # what a 10 Mbit/s shaper carries of a cubic flow's payload


@pytest.mark.parametrize("queue", ["pfifo", "fq_codel"])
def test_a_deep_fifo_bloats_the_rtt_and_fq_codel_does_not(tcpnet, queue):
    """Measures a TCP request/response probe every 10 ms on a 10 Mbit/s, 20 ms path, idle for 1 s and then for 8 s
    beside one cubic download, through a 500-packet pfifo and through fq_codel; asserts the idle RTT is the
    path's (within 15% of 20 ms; the probe times the path as ping does, with kernel timestamps: measured 20.6 ms
    quiet and beside CPU hogs, where the application's own timing read up to 24.0 ms), the load adds < 30 ms at
    p95 through fq_codel (the probe is a flow of its own there, served before the bulk flow's queue), and the
    download carries >= 85% of the payload rate through both.

    Through the FIFO the yardstick is the queue itself, not one kernel's figure: the p95 added delay is at most
    what the model says a full 500-packet queue holds (606 ms at 10 Mbit/s, +5% for the probe's own packet and
    timer slack) and at least 5x the path's RTT (100 ms), which neither an empty queue nor fq_codel's 5 ms
    target comes near. Measured under User-Mode Linux in fresh-clone CI runs (one beside a CPU hog): 359-419 ms
    under 6.1 and 347-427 ms under 6.12, where cubic keeps the queue between its 0.7x back-off and full. Under
    software emulation (TCG) 6.1 read 147-169 ms (its receive window, autotuned from a bloated RTT, stopped the
    sender short of filling the queue) and 6.12 ~455 ms; an earlier "> 150 ms" sat on that 6.1 figure and failed
    at 147.4 ms."""
    pair = tcpnet.pair(
        Link(rate="10mbit", rtt="20ms", queue=queue, limit=500 if queue == "pfifo" else None), server=Host(cc="cubic")
    )
    result = pair.latency_under_load(duration=8, flows=[Flow(duration=8, cc="cubic")], idle=1.0)
    figures = result.describe()
    assert abs(result.idle_rtt_s - 0.020) <= 0.15 * 0.020, figures
    induced = result.induced_latency_s(95)
    if queue == "pfifo":
        full = expected_throughput(result.flows.flows[0]).conditions.queue_packets * 1514 * 8 / 10e6
        assert 5 * 0.020 < induced <= 1.05 * full, (
            f"induced {induced * 1e3:.1f} ms, full queue {full * 1e3:.0f} ms",
            figures,
        )
    else:
        assert induced < 0.030, figures
    assert result.flows.total_bps >= 0.85 * PAYLOAD_10MBIT, figures


@pytest.mark.parametrize("queue", ["fq_codel", pytest.param("codel", marks=pytest.mark.tcpnet_needs("codel"))])
def test_ecn_marks_replace_drops(tcpnet, queue):
    """Measures a 5 s cubic download through fq_codel (and codel) with ECN at 10 Mbit/s and 20 ms, both hosts asking
    for ECN (net.ipv4.tcp_ecn=1); asserts the queue marked packets, the sender learnt of them (TCP_INFO
    delivered_ce), nothing was dropped and at most 2 segments were resent for a loss (DSACKed resends are no
    loss): the marks did what drops would have."""
    ecn = Host(sysctls={"net.ipv4.tcp_ecn": 1}, cc="cubic")
    pair = tcpnet.pair(Link(rate="10mbit", rtt="20ms", queue=queue, ecn=True), client=ecn, server=ecn)
    result = pair.transfer(duration=5, cc="cubic", capture=True)
    figures = result.describe() + f"\nECE {result.events['ece']}, CWR {result.events['cwr']}"
    assert result.queue_ecn_marks > 0 and result.ce_marks > 0, figures
    # One CWR per cwnd reduction: Linux queues CWR for every one (tcp_init_cwnd_reduction, tcp_enter_loss), so a
    # mark the sender reacted to sends one, and so does a recovery a resend started, spurious or not (fresh-clone
    # CI run ci52: 12 marks, 2 DSACKed resends, 13 CWR). Measured quiet: codel 12 marks, 12 CWR; fq_codel 11 and
    # 11; ce_marks 356 and 297, the segments ECE covered.
    assert 0 < result.events["cwr"] <= result.queue_ecn_marks + result.retransmits, figures
    # No data segment was lost: a lost one is resent, and beside a CPU hog the emulated guest's late timers resent
    # 3 segments the receiver already had (all 3 DSACKed; fresh-clone CI run ci46), so the resends that count are
    # those the receiver did not report as duplicates (measured 0-1 in every run).
    assert result.retransmits - (result.sender_tcp_info.get("dsack_dups") or 0) <= 2, figures
    # The queue may still drop what it cannot mark: pure ACKs, SYN and FIN are not ECN-capable, and codel drops a
    # packet that waited past its target either way (fresh-clone CI run ci4 under UML 6.1: 1 drop, 0 resends, 16
    # marks). Every earlier run dropped nothing; a few such drops are not loss of data.
    assert result.emulator_drops <= 2, figures


@pytest.mark.tcpnet_needs("dctcp")
def test_dctcp_fills_a_link_that_marks_above_a_shallow_threshold(tcpnet):
    """DCTCP (RFC 8257) behind a queue that marks every ECN-capable packet above a shallow threshold, as a data
    centre switch does: fq_codel with ce_threshold 4 ms (about 3 packets; RFC 8257's K > BDP/7 is 2.4 packets
    here) at 10 Mbit/s, 20 ms. A 5 s dctcp download and the same through cubic with classic ECN; asserts dctcp is
    marked (queue marks and delivered_ce > 0) yet fills the link (>= 85% of the payload rate: measured
    0.96-1.00, 2 runs on each of 6.1 and 6.12), resends at most 2 segments for a loss, keeps its median
    queueing delay (srtt less the path's 20 ms, after slow start) under 10 ms (measured 4.0-4.1 ms), and
    carries more than cubic, which halves its window at each mark (measured cubic at 0.82-0.88x of dctcp's
    rate; < 0.95x asserted). With a 1 ms threshold, under one packet's time at 10 Mbit/s, dctcp carried
    5.2-5.4 Mbit/s: the threshold must leave room for a few packets."""
    link = Link(rate="10mbit", rtt="20ms", queue="fq_codel", ecn=True, queue_options={"ce_threshold": "4ms"})
    ecn = {"net.ipv4.tcp_ecn": 1}
    results = {
        cc: tcpnet.pair(link, client=Host(sysctls=ecn), server=Host(sysctls=ecn, cc=cc)).transfer(duration=5, cc=cc)
        for cc in ("dctcp", "cubic")
    }
    figures = "\n".join(f"{cc}: {r.describe()}" for cc, r in results.items())
    dctcp, cubic = results["dctcp"], results["cubic"]
    resent_for_loss = dctcp.retransmits - (dctcp.sender_tcp_info.get("dsack_dups") or 0)  # as in the ECN test
    assert dctcp.queue_ecn_marks > 0 and dctcp.ce_marks > 0 and resent_for_loss <= 2, figures
    assert dctcp.throughput_bps >= 0.85 * PAYLOAD_10MBIT, figures
    rtt = [us / 1e6 for _, us in dctcp.series("rtt")]
    queued = statistics.median(rtt[len(rtt) // 5 :]) - 0.020  # after slow start
    assert queued < 0.010, (queued, figures)
    assert cubic.throughput_bps < 0.95 * dctcp.throughput_bps, figures


@pytest.mark.tcpnet_needs("police")
def test_a_cubic_flow_through_a_policer(tcpnet):
    """Measures a 6 s cubic download through a 10 Mbit/s policer (no shaper, 20 ms) with the default bucket (50 ms of
    the rate, 62.5 KB) and with a 15 KB one (under the path's 25 KB BDP); asserts the policer drops (it queues
    nothing), the default bucket lets the flow reach >= 85% of 10 Mbit/s, and the small one costs it a lot of
    that (measured 9.56 vs 5.6-7.0 Mbit/s in the 6.1 VM: each drop halves cubic's window, and a small bucket
    drops at every burst)."""
    default = tcpnet.pair(Link(police="10mbit", rtt="20ms"), server=Host(cc="cubic")).transfer(duration=6, cc="cubic")
    small = tcpnet.pair(Link(police="10mbit", burst="15kb", rtt="20ms"), server=Host(cc="cubic")).transfer(
        duration=6, cc="cubic"
    )
    figures = f"{default.describe()}\n{small.describe()}"
    assert default.emulator_drops > 0 and small.emulator_drops > 0, figures
    assert default.throughput_bps >= 0.85 * 10e6, figures
    assert small.throughput_bps <= 0.9 * default.throughput_bps, figures


# heistp/l4s-tests' s1_table.md (real hardware, 10 Mbit/s, two cubic flows of 160 and 10 ms RTT, steady state):
# pfifo(200) 4.80 / 4.63 Mbit/s, Jain 1.000; fq_codel 4.15 / 5.11 Mbit/s, Jain 0.989.
PUBLISHED_160_10 = {"pfifo": (4.80e6, 4.63e6, 1.000), "fq_codel": (4.15e6, 5.11e6, 0.989)}


@pytest.mark.parametrize("queue", ["pfifo", "fq_codel"])
def test_two_flows_of_10_and_160_ms_share_a_bottleneck_as_published(tcpnet, queue):
    """Measures two cubic downloads at once through one 10 Mbit/s bottleneck (pfifo of 200 packets, or fq_codel)
    from servers 160 ms and 10 ms of RTT away, over seconds 8-20; asserts the two together carry >= 85% of the
    payload rate, fq_codel shares them fairly (Jain >= 0.9; published 0.989), and through the FIFO the far flow
    gets more than twice the share its base RTT alone would give it. By base RTTs (throughput ~ 1/RTT) the far
    flow's share would be (1/160)/(1/160 + 1/10) = 5.9%; the FIFO's queue (up to 242 ms) adds the same delay to
    both paths, which lifts it. The published Jain 1.000 does not reproduce here: over seconds 8-20 the far flow
    got 19-61% of the pair's rate (1.86-5.74 Mbit/s of ~9.5; Jain 0.73-0.97+, 7 runs on 6.1 and 6.12 in TCG and
    UML guests), so that is reported, not asserted; a fixed ">= 20% of the link" failed at 19.4% (UML 6.1).
    fq_codel shares by flow whatever the RTT."""
    bell = tcpnet.dumbbell(
        2,
        bottleneck=Link(rate="10mbit", queue=queue, limit=200 if queue == "pfifo" else None),
        access=[Link(rtt="160ms"), Link(rtt="10ms")],
        servers=Host(cc="cubic"),
    )
    result = bell.concurrent([Flow(duration=20, cc="cubic"), Flow(duration=20, cc="cubic")])
    far_bps, near_bps = result.rates_between(8.0, 20.0)
    from pytest_tcpnet.results import jain_index

    jain = jain_index([far_bps, near_bps])
    published = PUBLISHED_160_10[queue]
    figures = (
        f"{queue}: 160 ms {far_bps / 1e6:.2f}, 10 ms {near_bps / 1e6:.2f} Mbit/s, Jain {jain:.3f} "
        f"(published {published[0] / 1e6:.2f} / {published[1] / 1e6:.2f}, {published[2]:.3f})\n{result.describe()}"
    )
    if queue == "fq_codel":
        assert jain >= 0.9, figures
    else:
        base_rtt_share = (1 / 0.160) / (1 / 0.160 + 1 / 0.010)
        assert far_bps >= 2 * base_rtt_share * (far_bps + near_bps), (
            f"the far flow's share {far_bps / (far_bps + near_bps):.1%} is not above twice the {base_rtt_share:.1%} "
            f"its base RTT alone gives it",
            figures,
        )
    assert far_bps + near_bps >= 0.85 * PAYLOAD_10MBIT, figures


@pytest.mark.parametrize("queue", ["pfifo", "fq_codel"])
def test_unresponsive_udp_beside_a_cubic_flow(tcpnet, queue):
    """Measures 6 Mbit/s of constant-rate UDP beside a cubic download for 8 s at 10 Mbit/s and 20 ms. Through a
    200-packet pfifo the stream keeps its rate, cubic gets the rest, and both wait behind the FIFO (the stream's
    datagrams > 100 ms one way). Through fq_codel each flow gets about half: the stream loses what exceeds its
    share (> 10%) and the cubic flow gets >= 4 Mbit/s at an RTT near the path's, isolated from the stream's queue.
    The stream itself is not protected: CoDel raises its drop rate only gradually, so an unresponsive flow keeps
    a standing queue of its own (its one-way delay p95 was 235 ms in the 6.1 VM) - the known case cake's COBALT
    addresses."""
    from pytest_tcpnet import Cbr

    pair = tcpnet.pair(
        Link(rate="10mbit", rtt="20ms", queue=queue, limit=200 if queue == "pfifo" else None), server=Host(cc="cubic")
    )
    result = pair.concurrent([Flow(duration=8, cc="cubic"), Cbr("6mbit", duration=8)])
    stream, flow = result.udp[0], result.flows[0]
    figures = result.describe() + f"\ncubic srtt {flow.rtt_s * 1e3:.1f} ms"
    if queue == "pfifo":
        assert stream.loss < 0.1 and flow.throughput_bps < 5e6, figures
        assert stream.one_way_delay_s(50) > 0.1, figures
    else:
        assert flow.throughput_bps >= 4e6 and stream.loss > 0.1, figures
        assert flow.rtt_s < 0.050, figures
