"""Unresponsive cross traffic (issue 21): UDP constant-bit-rate streams, their loss and one-way delay."""

import pytest
from refusals import assert_refused

from pytest_tcpnet import Cbr, Flow, Link, assert_share_within

UDP_FRAME = 1200 + 8 + 20 + 14  # payload, UDP, IPv4 and Ethernet headers: what htb counts per datagram


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(rate=0, duration=1), ["Cbr.rate", "> 0"]),
        (dict(rate="2gbit", duration=1), ["Cbr.rate", "1 Gbit/s"]),
        (dict(rate="1mbit", duration=0), ["Cbr.duration", "(0, 3600]"]),
        (dict(rate="1mbit", duration=1, packet_size=9000), ["Cbr.packet_size", "16..1452"]),
        (dict(rate="1mbit", duration=1, packet_size=2.5), ["Cbr.packet_size"]),
        (dict(rate="900mbit", duration=1, packet_size=16), ["Cbr.rate", "datagrams/s"]),
        (dict(rate="1mbit", duration=1, start=-1), ["Cbr.start"]),
        (dict(rate="1mbit", duration=1, direction="sideways"), ["Cbr.direction", "download"]),
    ],
)
def test_a_bad_stream_is_refused_naming_the_field(kwargs, words):
    assert_refused(lambda: Cbr(**kwargs), ValueError, words)


@pytest.mark.tcpnet_needs("privilege")
def test_concurrent_needs_a_tcp_flow_beside_its_streams(tcpnet):
    with pytest.raises(TypeError, match="at least one"):
        tcpnet.pair().concurrent([Cbr("1mbit", duration=1)])


@pytest.mark.tcpnet_needs("privilege", "cubic")
def test_a_stream_above_the_link_s_rate_loses_the_excess_and_waits_in_the_queue(tcpnet):
    """12 Mbit/s of 1200-byte datagrams into 10 Mbit/s (9.66 Mbit/s of their payload) with a 100-packet FIFO:
    the excess is lost at the queue (1 - 9.66/12 = 19.5%) and every datagram that gets through waits behind a full
    queue (100 x 1242 B at 10 Mbit/s = 99 ms one way); the same stream at 4 Mbit/s loses nothing and waits for
    nothing."""
    pair = tcpnet.pair(Link(rate="10mbit", limit=100))
    over = pair.latency_under_load(duration=3, flows=[Cbr("12mbit", duration=3)], idle=0.2).udp[0]
    dropped = over.emulator_drops  # the kept take's own: a take voided beside steal dropped its share too (run 55)
    under = pair.latency_under_load(duration=2, flows=[Cbr("4mbit", duration=2)], idle=0.2).udp[0]
    queue_delay = 100 * UDP_FRAME * 8 / 10e6
    carried = _rate_while_the_queue_stood(over, queue_delay)
    figures = f"{over.describe()}\n{under.describe()}\nthe queue dropped {dropped}; " + (
        f"the link carried {carried / 1e6:.3f} Mbit/s of frames while its queue stood"
        if carried is not None
        else "no two datagrams waited behind a nearly full queue"
    )
    assert carried is not None, figures
    # Lost at the queue, nowhere else: the FIFO's drops are the lost datagrams, plus at most the stream's three end
    # markers (sent into the full queue) and the latency probe's packets (58 in 3 s).
    assert 0 <= dropped - (over.sent - over.received) <= 3 + 60, figures
    # The link carries at most its rate while the queue stands (htb cannot send faster), and close to it: htb's
    # burst (4 ms of its rate on the host) holds a timer that late, but a vCPU its hypervisor wakes later still
    # loses what htb could not send then. Earlier CI machines' loss (16.88-16.91%) puts the carried rate at
    # 9.99-10.0 Mbit/s; a quiet Firecracker VM with ~1% steal, a 1 ms burst then, read 9.77-9.99 (6 runs), 9.49-9.99
    # beside a CPU hog on both cores (6), 9.99 rootless beside the hog (6), and 9.01 once by a window that also left
    # out the sender's stalls.
    assert 0.85 * 10e6 <= carried <= 1.02 * 10e6, figures
    # The first 100 datagrams over the rate fill the queue instead of being dropped, and that queue drains to the
    # receiver after the sender stops: of the ~3750 sent, the excess over what the link carried less 100 is lost
    # (16.82% at exactly 10 Mbit/s). Judged against the asked rate, a fresh-clone run on that VM read 17.92% (its
    # link 1.3% slow); against the carried rate the same 18 runs read -0.41 to +0.32 points from the model; within
    # 1 point.
    expected_loss = ((1 - carried * 1200 / UDP_FRAME / 12e6) * over.sent - 100) / over.sent
    assert over.loss == pytest.approx(expected_loss, abs=0.01), figures
    assert over.one_way_delay_s(50) == pytest.approx(queue_delay, rel=0.1), figures
    assert under.loss == 0 and under.one_way_delay_s(95) < 0.005, figures


def _rate_while_the_queue_stood(stream, queue_delay):
    """Frames per second (bit/s on the wire) the link delivered from the first datagram that waited behind a nearly
    full queue to the last that arrived before the sender stopped; None if no queue stood that long."""
    arrivals = sorted(received for _, _, received in stream.arrivals)
    stood = min(
        (received for _, sent, received in stream.arrivals if received - sent >= 0.9 * queue_delay), default=None
    )
    carried = [received for received in arrivals if stood is not None and stood <= received <= stream.ended_at]
    if len(carried) < 2 or carried[-1] == carried[0]:
        return None
    return (len(carried) - 1) * UDP_FRAME * 8 / (carried[-1] - carried[0])


@pytest.mark.tcpnet_needs("privilege", "cubic")
def test_a_stream_takes_its_rate_from_a_cubic_flow_through_a_fifo(tcpnet):
    """Cubic beside 4 Mbit/s of UDP on a 10 Mbit/s FIFO: the stream is unresponsive, so cubic gets what is left,
    the model's share: 5.605 Mbit/s of payload beside the stream's 3.96 (4 Mbit/s of payload is 4.14 on the wire,
    in a flow's 0.956 payload-per-wire), and the whole link for the drain of its buffers after the stream stops
    (5.78-5.85 Mbit/s over its span). Measured 1.002-1.010 of that share in 7 fresh-clone CI runs (one beside a
    CPU hog on both cores) and 4 more runs; judged +-5%. (A bound of 1.05 x (9.56 - 3.86) Mbit/s judged it before:
    the stream's wire share taken as 4 x 1200/1242 instead of 4 x 1242/1200, and no drain, left it 1.8% above the
    highest run.) The stream loses little (cubic's own drops share the FIFO with it)."""
    pair = tcpnet.pair(Link(rate="10mbit", limit=100))
    result = pair.concurrent([Flow(duration=4, cc="cubic"), Cbr("4mbit", duration=4)])
    stream, flow = result.udp[0], result.flows[0]
    figures = result.describe()
    # Unresponsive: the sender keeps its rate whatever the queue does (1666 of 1667 datagrams in 4 s in a CI run
    # beside two CPU hogs and a guest), and only what the FIFO drops is lost. Its received rate is that less its loss
    # and less the one-way delay its clock counts too (~100 ms of 4 s): 3.79 Mbit/s at 2.7% loss in that run, 3.89-3.90
    # at 0.3-0.7% beside the two hogs alone; a check of that rate against 4 Mbit/s +-5% failed for a loss the claim
    # allows.
    offered = stream.sent * stream.packet_size * 8 / 4
    assert offered == pytest.approx(4e6, rel=0.02) and stream.loss < 0.05, figures
    assert flow.share.established and "after 3.96 Mbit/s of unresponsive traffic" in flow.share.why, figures
    assert_share_within(flow, rel=0.05)
