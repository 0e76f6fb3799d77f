"""Beyond one pair (source 001's per-destination delay; RTT unfairness through one bottleneck).

Source 001: "delay the traffic to one IP only" —
    tc qdisc add dev eth0 root handle 1: prio
    tc filter add dev eth0 parent 1:0 protocol ip pref 55 handle ::55 u32 match ip dst 172.31.65.30 flowid 2:1
    tc qdisc add dev eth0 parent 1:1 handle 2: netem delay 17ms
A star does that: server i's traffic crosses links[i] alone (docs/topologies.md). The source then
gives up on "delay for one IP address and port" as too hard; Link(ports=[...]) does it.
"""

import pytest

from pytest_tcpnet import Flow, Host, Link, assert_share_within

pytestmark = pytest.mark.tcpnet_needs("netem")


def test_delay_for_one_destination_only(tcpnet):
    """Source 001's `u32 match ip dst ... netem delay 17ms`: measures a 1 MB upload to each of two servers
    of a star whose first server's link delays what goes to it by 17 ms; asserts the flow to it sees a
    minimum RTT of 17 ms (+ at most 4 ms of the path's own) and the flow to the other under 4 ms."""
    star = tcpnet.star(servers=2, links=[Link(to_server={"delay": "17ms"}), None])
    # 1 MB: min_rtt is a minimum over round trips, and a 200 KB flow gives only a handful of them.
    delayed, direct = (pair.transfer(1_000_000, direction="upload") for pair in star.pairs)
    assert 0.017 <= delayed.min_rtt_s < 0.021, delayed.describe()
    assert direct.min_rtt_s < 0.004, direct.describe()


@pytest.mark.tcpnet_needs("iperf3")
def test_delay_for_one_port_only(tcpnet):
    """Source 001's "IP and port" it could not do: measures iperf3 (TCP port 5201) and a bulk flow (an
    ephemeral port) on a path whose 20 ms of RTT applies to port 5201 alone; asserts iperf3's flow sees
    a minimum RTT of 20 ms (+ at most 4) and the other one under 4 ms."""
    pair = tcpnet.pair(link=Link(rtt="20ms", ports=[5201]))
    delayed, direct = pair.iperf3(duration=1), pair.transfer(1_000_000)
    assert 0.020 <= delayed.min_rtt_s < 0.024, delayed.describe()
    assert direct.min_rtt_s < 0.004, direct.describe()


def test_a_near_flow_takes_more_of_a_shared_bottleneck_than_a_far_one(tcpnet):
    """RTT unfairness: measures two cubic downloads at once through one 20 Mbit/s bottleneck (30-packet queue,
    18 ms) from servers 10 ms and 80 ms of RTT away (access links); asserts each flow's minimum RTT is its
    path's and the near flow gets at least 1.5x the far one's goodput over seconds 2-8 (cubic grows its
    window per round trip, and the near flow's rounds are several times shorter)."""
    # The queue matters: it adds the same wait to both RTTs and so evens them out. Beside a CPU hog in
    # the emulated guest, 3 runs each: 30 packets gave 4.2-6.6x (srtt 25-41 vs 86 ms); 100 packets
    # (60 ms) 1.4-2.3x (srtt 59-69 vs 82-86 ms), too close to the claim to judge it.
    bell = tcpnet.dumbbell(
        2,
        bottleneck=Link(rate="20mbit", limit=30),
        access=[Link(rtt="10ms"), Link(rtt="80ms")],
        servers=Host(cc="cubic"),
    )
    result = bell.concurrent([Flow(duration=8.0, cc="cubic"), Flow(duration=8.0, cc="cubic")])
    near, far = result.flows
    assert 0.010 <= near.min_rtt_s < 0.014 and 0.080 <= far.min_rtt_s < 0.084, result.describe()
    near_bps, far_bps = result.rates_between(2.0, 8.0)
    assert near_bps >= 1.5 * far_bps, (
        f"near {near_bps / 1e6:.2f} vs far {far_bps / 1e6:.2f} Mbit/s\n{result.describe()}"
    )


def test_reno_flows_of_different_rtts_get_the_share_the_literature_brackets(tcpnet):
    """RTT unfairness against the model: measures two reno downloads at once for 8 s through a 20 Mbit/s bottleneck
    with a 50-packet FIFO (30 ms), from servers 10 and 80 ms of RTT away; asserts each flow is within ±15% of the
    range its share is given (throughput ~ 1/RTT^a, a from 1 (Mathis et al. 1997) to 2 (Lakshman & Madhow 1997),
    RTTs counted with 0 to 30 ms of standing queue: near 14.2-18.9, far 0.3-5.1 Mbit/s, more for the time each
    ran alone: the whole link at the top, and at the bottom what a reno window growing a segment per round trip
    reaches (the far flow's first byte follows the near one's by 33-176 ms under UML since both wait at the start
    gate; before it, by 0.3-1.4 s; it runs alone as long at its end).

    Measured (UML, 10 runs on 6.1 and on 6.12): every flow within its range but one, a near flow at 0.93 of the
    low end; in 8 fresh-clone CI runs (16 runs of each flow over both lines, one CI run beside a CPU hog) every
    flow within its range but two near flows under 6.1, at 0.884 and 0.991 of the low end (the far flow at most
    0.875 of its high end). A ninth run's far flow carried 1.82 Mbit/s where the whole link, owed for its last
    1.25 s alone, had lifted its low end to 3.19; at 80 ms its window grew from 8 to 21 segments in 6 s. With the
    window's growth, 12 runs: near 0.93-1.17 of its low end, far 0.37-1.04 of its high end. ±15% leaves 3.4
    points below the lowest near flow and 11 above the highest far one. With the start gate (6.1 and 6.12, one run
    each): near 16.0 and 16.6 Mbit/s against a low end of 14.0, far 3.0 and 2.4 against a high end of 5.4 and 5.3."""
    bell = tcpnet.dumbbell(
        2,
        bottleneck=Link(rate="20mbit", limit=50),
        access=[Link(rtt="10ms"), Link(rtt="80ms")],
        servers=Host(cc="reno"),
    )
    result = bell.concurrent([Flow(duration=8.0, cc="reno"), Flow(duration=8.0, cc="reno")])
    near, far = result.flows
    assert near.share.ranged and far.share.ranged and "a from 1 to 2" in near.share.why, near.share.why
    assert far.share.high_bps < near.share.low_bps, result.describe()  # the near flow is owed more, whatever a
    assert_share_within(result, rel=0.15)


def test_a_deep_fifo_leaves_different_rtts_unsettled_for_longer_than_a_test_runs(tcpnet):
    """The same two reno flows behind the default 1000-packet FIFO (606 ms): one congestion epoch (regrowing half a
    window of hundreds of segments a segment per round trip) takes minutes, so after 8 s the model claims no share
    and says why; asserts the shares are not predicted, the verdict refuses, and the far flow is still far behind
    (measured under UML 6.1: 0.39 and 0.44 of 19.1 Mbit/s against the near flow's 18.8 and 18.7)."""
    bell = tcpnet.dumbbell(
        2, bottleneck=Link(rate="20mbit"), access=[Link(rtt="10ms"), Link(rtt="80ms")], servers=Host(cc="reno")
    )
    result = bell.concurrent([Flow(duration=8.0, cc="reno"), Flow(duration=8.0, cc="reno")])
    near, far = result.flows
    assert not near.share.established and not near.share.ranged, near.share.why
    assert "converge over several congestion epochs" in near.share.why, near.share.why
    with pytest.raises(ValueError, match="no share to judge against"):
        assert_share_within(result, rel=0.15)
    assert far.throughput_bps < near.throughput_bps, result.describe()


@pytest.mark.tcpnet_needs("fq_codel")
@pytest.mark.parametrize("cc", ["reno", "cubic"])
def test_a_drop_tail_fifo_gets_no_share_and_fq_codel_splits_the_link_evenly(tcpnet, cc):
    """Fairness per congestion control through drop-tail and through fq_codel, side by side: two flows of one cc for
    8 s on 20 Mbit/s at 10 ms. Behind the default 1000-packet FIFO (606 ms) a congestion epoch takes seconds to
    minutes, and meanwhile one flow can hold the queue (lock-out: RFC 7567, section 2.1): the model claims no share
    and says why. fq_codel serves each flow's queue in turn (RFC 8290), so each is owed half, whatever its cc.

    Measured under UML 6.1 and 6.12 (8 runs per cc): through the FIFO reno 17.7-18.8 against 0.34-1.46 Mbit/s (Jain
    0.52-0.58), cubic 14.3-15.6 against 3.8-5.1 (Jain 0.73-0.82, and 0.901 in a run beside a CPU hog on both cores);
    but in a CI run beside the hog two reno flows each met two retransmission timeouts and split 12.5 / 8.3 (Jain
    0.962): a lock-out can happen, not must, which is why the model claims no share there, and neither does this test.
    Through fq_codel every flow 0.984-1.002 of its share, Jain >= 0.999. Judged: the FIFO's refusal and its reason
    (lock-out named for reno's minutes-long epochs), fq_codel's shares within ±8% (5 times the largest miss) and
    Jain >= 0.98."""
    from pytest_tcpnet import assert_fair

    flows = [Flow(duration=8.0, cc=cc), Flow(duration=8.0, cc=cc)]
    fifo = tcpnet.pair(Link(rate="20mbit", rtt="10ms")).concurrent(flows)
    for flow in fifo.flows:
        assert not flow.share.established and "converge to equal shares over congestion epochs" in flow.share.why
        assert cc != "reno" or "lock a flow out" in flow.share.why, flow.share.why
    with pytest.raises(ValueError, match="no share to judge against"):
        assert_share_within(fifo, rel=0.15)

    fair = tcpnet.pair(Link(rate="20mbit", rtt="10ms", queue="fq_codel")).concurrent(flows)
    if any("met at most 1 of its per-flow queues" in flow.share.why for flow in fair.flows):
        # The two hashed into one of fq_codel's 1024 queues (about 1 run in 1024): a FIFO of two, owed nothing equal.
        with pytest.raises(ValueError, match="no share to judge against"):
            assert_share_within(fair, rel=0.08)
        return
    assert all("(fq_codel queues per flow)" in flow.share.why for flow in fair.flows), fair.describe()
    assert_share_within(fair, rel=0.08)
    assert_fair(fair, jain=0.98)


@pytest.mark.tcpnet_needs("fq_codel", "bbr")
def test_bbr_beside_cubic_takes_what_the_buffer_depth_gives_it_and_half_through_fq_codel(tcpnet):
    """bbr beside cubic, as published: one flow each for 8 s on 20 Mbit/s at 10 ms (a BDP of ~17 packets). Through a
    drop-tail FIFO the split depends on its depth (Hock, Bless & Zitterbart, "Experimental evaluation of BBR
    congestion control", ICNP 2017: BBR starves CUBIC in a buffer under a BDP, CUBIC takes most of one of several
    BDPs, where BBR's window is capped at twice its BDP estimate); the model claims no share and says which way it
    goes. fq_codel serves each flow's queue in turn (RFC 8290): each is owed half, whatever its cc.

    Measured under UML 6.1 and 6.12 (15 runs, 2 of them beside a CPU hog on both cores): through 8 packets (0.48 BDP)
    bbr carried 0.86-0.95 of the two flows' goodput; through 300 (18 BDP) 0.12-0.19; through fq_codel each flow
    0.96-1.02 of its share. Once, beside a hog, bbr carried 0.83 through fq_codel, as two flows hashed into one of
    its queues would (nothing read the queues then); the lab now reads how many of fq_codel's queues the flows met
    (two in 85-90% of the reads in 16 runs beside a hog), and two flows in one are owed no share. Judged: the
    refusal and its direction; bbr's fraction above 0.7 and below 0.35 (each bound about twice the measured spread
    beyond the nearest run, and on the published side of a half); fq_codel's shares within ±8% and Jain >= 0.98."""
    from pytest_tcpnet import assert_fair

    flows = [Flow(duration=8.0, cc="bbr"), Flow(duration=8.0, cc="cubic")]

    def bbr_fraction(result):
        bbr, cubic = (flow.throughput_bps for flow in result.flows)
        return bbr / (bbr + cubic)

    for limit, direction, judged in [
        (8, "bbr takes most of the link", lambda f: f > 0.7),
        (300, "the loss-based flows take most of the link", lambda f: f < 0.35),
    ]:
        fifo = tcpnet.pair(Link(rate="20mbit", rtt="10ms", limit=limit)).concurrent(flows)
        for flow in fifo.flows:
            assert not flow.share.established and "no established model for bbr beside cubic" in flow.share.why
            assert direction in flow.share.why, flow.share.why
        with pytest.raises(ValueError, match="no share to judge against"):
            assert_share_within(fifo, rel=0.15)
        assert judged(bbr_fraction(fifo)), f"bbr carried {bbr_fraction(fifo):.2f} of the goodput\n{fifo.describe()}"

    fair = tcpnet.pair(Link(rate="20mbit", rtt="10ms", queue="fq_codel")).concurrent(flows)
    assert all("(fq_codel queues per flow)" in flow.share.why for flow in fair.flows), fair.describe()
    assert_share_within(fair, rel=0.08)
    assert_fair(fair, jain=0.98)
