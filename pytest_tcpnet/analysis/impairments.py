"""What a link applied against what it was asked: loss as the traffic met it (its qdisc counters), and the round
trip's floor (its sender's TCP_INFO min_rtt).

`tc qdisc show` reads back what was configured, not what happened: a netem asked for 2% loss
with 25% correlation reads "loss 2% 25%" and drops nothing (model/netem.py says why). The
counters say what happened: netem counts every packet it lost among its drops, and its queue
child's overflow drops (which netem's counter includes) are the child's own. So per shaped
interface: packets offered = passed + lost, and the applied loss rate is lost / offered.

Chance is judged with the spread a loss process of that rate has: binomial for independent
losses, times an index of dispersion for bursty ones ((1 + lambda) / (1 - lambda), lambda the
lag-one correlation: 1 - p - r for Gilbert-Elliott, rho for netem's correlated draw). A count
more than Z_LIMIT of those standard deviations away, and more than MIN_RELATIVE off in rate,
is not chance; with fewer than MIN_EXPECTED losses expected nothing is judged.

The rate is what the flow's ACKs came back at while its packets stood in the bottleneck's queue: a
busy shaper sends at its rate, so the payload acknowledged per second then is the link's payload
rate. A queue stands when more is in flight than the path holds (the rate times the round trip's
floor) by a few segments: the sender's unacked segments say so at each sample, without the lag of
the smoothed RTT. Counted only while the sender had data and a window, recovered no loss and saw its receive window
hold (applied_rate says why each); judged only where that says something: a FIFO (an AQM empties its queue on
purpose), no loss asked, no other traffic, no changes, and at least half a second of standing queue.

The round trip's floor is the least RTT the sender measured: the Link's delays both ways, plus
sending one full frame and its ACK at the links' rates. Below the delays, or above them by more
than max(1 ms, 5%) (plus a software-emulated guest's timer slack), the path is not the one asked
for: netem's delay not applied, or a delay added that the Link did not ask for (a second netem,
a queue that never drains, timers late on a busy host). Only the first is judged where other
traffic crossed the flow's shapers (another flow, a UDP stream): their packets may hold the
queue for the flow's whole life, so a floor above the delays is no sign of a wrong path there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from ..model import format_rate, link_goodput
from ..model.netem import effective_rate

__all__ = [
    "AppliedLoss",
    "applied_losses",
    "AppliedDelay",
    "applied_delay",
    "AppliedDuplicate",
    "applied_duplicate",
    "AppliedReorder",
    "applied_reorder",
    "others_packets",
    "AppliedRate",
    "RateSample",
    "applied_rate",
    "RATE_TOLERANCE",
    "Z_LIMIT",
    "DELAY_TOLERANCE",
]

#: Standard deviations beyond which a loss count is not chance: P < 1e-4 two-sided under a normal spread.
Z_LIMIT = 4.0
#: A mismatch must also be this large in rate (10%), so a huge sample does not flag a trivial difference.
MIN_RELATIVE = 0.10
#: Losses the asked rate must expect before a count can be judged (below it, 0 is not unusual).
MIN_EXPECTED = 8.0
_NETEM = "netem"
#: How far the round trip's floor may sit above the asked delays, beyond a frame's and an ACK's sending time: the
#: larger of 1 ms and 5% of the delays. netem's delays in a User-Mode Linux guest land well within it (docs/vm.md,
#: "Fidelity and cost").
DELAY_TOLERANCE = (1e-3, 0.05)
_FRAME_BYTES, _ACK_BYTES = 1514, 66  # a full Ethernet frame and a bare ACK with timestamps on the wire
#: Packets beyond a connection's own segments that make its path shared: a tenth of its own and at least 20 (a
#: workload's control connection or neighbour discovery stay below it; a flow or stream beside it does not).
SHARED_SHARE, SHARED_MIN = 0.10, 20
#: A rate is judged only on a shaper that carried less than this share of other traffic beside the connection's own:
#: a second download with 5-9% of the packets (issue 34's two-download probe, UML 6.1) cost the first 5-7% of its
#: rate, which the 5% tolerance then named "not as configured".
RATE_SHARED_SHARE = 0.01
#: How far the rate a busy shaper delivered may sit from the Link's (in payload terms) before it is not chance: 5%.
RATE_TOLERANCE = 0.05
#: A queue stands at a sample when this many segments, and this share of what the path holds, are in flight beyond
#: it: delayed ACKs and a segment on the wire each way stay below the first; a window sized to the path, which can
#: keep a few segments queued and still not fill the shaper, below the second (docs/reports.md, "Verdicts you can
#: trust").
_STANDING_SEGMENTS, _STANDING_SHARE = 4, 0.10
#: The share of a run of standing intervals the sender must have had data to send and a receive window to send it in
#: (TCP_INFO busy_time less rwnd_limited) for the run to count: a reader that holds its flow back between samples
#: (curl --limit-rate) leaves a queue at each sample without keeping the shaper busy, and bulk flows are unaffected
#: (docs/reports.md, "Verdicts you can trust").
_BUSY_SHARE = 0.9
#: An interval counts only where the congestion window grew by less than this share of the segments acknowledged:
#: in slow start each acknowledged segment releases two, so the queue builds as fast as it drains and the path
#: carries twice the packets the shaper sends, which a one-CPU guest cannot keep up with (UML 6.1, reno through a
#: 50 Mbit/s 1000-packet FIFO, 6 runs: 0.954-1.014 of the rate in slow start, 0.991-1.001 after it); congestion
#: avoidance grows the window by at most half a segment per acknowledged one (cubic's cap), reno far less.
_BUILDING_SHARE = 0.75
#: Standing-queue time a rate needs before it is judged.
MIN_STANDING_S = 0.5
#: The shortest run of standing samples that counts toward it.
MIN_RUN_S = 0.2
_TC_H_ROOT = 0xFFFFFFFF


def _z(count: float, trials: int, rate: float, lag: float) -> float | None:
    """How many standard deviations count sits from rate's expectation over trials draws whose lag-one correlation is
    lag (the binomial spread widened by (1 + lag) / (1 - lag)); None: too few expected to judge."""
    expected = trials * rate
    if expected < MIN_EXPECTED or rate >= 1:
        return None
    dispersion = (1 + lag) / (1 - lag) if lag < 1 else float("inf")
    spread = math.sqrt(dispersion * expected * (1 - rate))
    return (count - expected) / spread if spread else None


@dataclass(frozen=True)
class AppliedLoss:
    """One shaped interface's loss: asked (the Link), expected (what netem's generator makes of it), applied."""

    ifname: str
    direction: str
    asked: float
    correlation: float
    bursty: float  # the lag-one correlation of a Gilbert-Elliott model's losses (0: none)
    expected: float
    offered: int
    lost: int
    #: netem holds the link's queue itself (a rate and no queue discipline of its own): its drops then include the
    #: queue's overflow, so only a loss below the asked one is judged: a startup that overflows the queue reads as
    #: more loss than asked (docs/reports.md, "Verdicts you can trust").
    overflows_here: bool = False

    @property
    def applied(self) -> float:
        return self.lost / self.offered if self.offered else 0.0

    def z(self, rate: float) -> float | None:
        """How many standard deviations the count sits from rate's expectation (None: too few to judge)."""
        return _z(self.lost, self.offered, rate, self.bursty or self.correlation)

    @property
    def key(self) -> tuple:
        return ("loss", self.ifname, self.offered, self.lost)

    def differs_from(self, rate: float) -> bool:
        """True when the applied loss is not what rate explains by chance."""
        z = self.z(rate)
        if z is None or (self.overflows_here and z > 0):
            return False
        return abs(z) > Z_LIMIT and abs(self.applied - rate) > MIN_RELATIVE * rate

    @property
    def as_configured(self) -> bool:
        """The traffic met the loss the Link asked for (within chance)."""
        return not self.differs_from(self.asked)

    @property
    def likely_cause(self) -> str:
        if self.correlation and not self.differs_from(self.expected) and self.expected != self.asked:
            return (
                f"netem's correlated draw applies {self.expected * 100:.3g}% for {self.asked * 100:.3g}% at "
                f"{self.correlation * 100:.3g}% correlation (docs/design.md, pitfall 13): use GilbertElliott for bursts"
            )
        return (
            "not what netem's own arithmetic gives either: the qdisc on the path is not the one asked for "
            "(check `tc -s qdisc show` in the router), or something else drops there"
        )

    def describe(self) -> str:
        asked = f"asked {self.asked * 100:.3g}%" + (
            f" with {self.correlation * 100:.3g}% correlation" if self.correlation else ""
        )
        line = (
            f"{self.direction.replace('_', ' ')} ({self.ifname}): loss {self.applied * 100:.3g}% applied "
            f"({self.lost} of {self.offered} packets{', its queue overflow included' if self.overflows_here else ''}), "
            f"{asked}"
        )
        if not self.as_configured:
            line = f"impairment not as configured: {line}; {self.likely_cause}"
        return line


def applied_losses(qdiscs: dict, shaped_ways: dict) -> list[AppliedLoss]:
    """One AppliedLoss per interface with a netem that was asked to lose packets (or asked nothing and lost some).

    qdiscs: {ifname: [qdisc counter rows over the measurement]} (TransferResult.qdiscs); shaped_ways:
    {ifname: (direction, OneWay)} (TransferResult.shaped_ways). Interfaces shaped per match (several netems)
    are left out: their counters mix the links of several pairs.
    """
    found = []
    for ifname, (direction, way) in shaped_ways.items():
        rows = qdiscs.get(ifname) or []
        netems = [q for q in rows if q.get("kind") == _NETEM]
        if len(netems) != 1 or not (way.loss or way.loss_model) or way.changes:
            continue  # a changing link's counters mix its phases: phases are judged by their own figures
        netem = netems[0]
        child_drops = sum(q.get("drops", 0) for q in rows if q.get("parent") == netem.get("handle"))
        lost = max(0, netem.get("drops", 0) - child_drops)
        model = way.loss_model
        found.append(
            AppliedLoss(
                ifname=ifname,
                direction=direction,
                asked=way.loss,
                correlation=way.loss_correlation,
                bursty=max(0.0, 1 - model.p - model.r) if model is not None else 0.0,
                expected=way.effective_loss if model is None else way.loss,
                offered=netem.get("packets", 0) + lost,
                lost=lost,
                overflows_here=bool(way.rate_bps) and way.queue is None,
            )
        )
    return found


@dataclass(frozen=True)
class AppliedDelay:
    """The round trip a flow's packets met (its sender's TCP_INFO min_rtt) against the Link's delays."""

    asked_s: float  # both ways' netem delays
    below_s: float  # how far below them the floor may be: jitter both ways (a distribution's tail), or all of it
    sending_s: float  # one full frame toward the receiver and its ACK back, at the links' rates
    slack_s: float  # a software-emulated guest's late timers
    floor_s: float  # what the sender measured
    others_packets: int = 0  # packets of other traffic its shapers carried (0: the path was its own)

    @property
    def tolerance_s(self) -> float:
        low, share = DELAY_TOLERANCE
        return max(low, share * self.asked_s) + self.slack_s

    @property
    def as_configured(self) -> bool:
        """The floor sits within what the asked delays, jitter and sending times allow."""
        lowest = self.asked_s - self.below_s - self.tolerance_s
        if self.others_packets:  # others' packets may have held the queue all along: only "too low" says something
            return lowest <= self.floor_s
        return lowest <= self.floor_s <= self.asked_s + self.sending_s + self.tolerance_s

    @property
    def key(self) -> tuple:
        return ("delay", round(self.asked_s, 6), round(self.floor_s, 6))

    @property
    def likely_cause(self) -> str:
        if self.floor_s < self.asked_s:
            return "the delay was not applied on this path: the qdisc there is not the one asked for"
        return (
            "the path adds delay the Link did not ask for: a second netem (on an endpoint?), a queue that never "
            "drains, or timers running late on a busy host"
        )

    def describe(self) -> str:
        sending = f" + {self.sending_s * 1e3:.3g} ms to send a frame and its ACK" if self.sending_s >= 1e-5 else ""
        over = (
            f"{self.others_packets} packets of other traffic shared its queue: any floor above judged fine"
            if self.others_packets
            else f"allowed {self.tolerance_s * 1e3:.3g} ms over"
        )
        line = (
            f"round trip floor {self.floor_s * 1e3:.4g} ms (the sender's min_rtt), asked {self.asked_s * 1e3:.4g} ms"
            f"{sending} ({over}" + (f", {self.below_s * 1e3:.3g} ms under" if self.below_s else "") + ")"
        )
        if not self.as_configured:
            line = f"impairment not as configured: {line}; {self.likely_cause}"
        return line


@dataclass(frozen=True)
class AppliedDuplicate:
    """The duplicates of a flow's data segments its receiver saw (the sender's TCP_INFO dsack_dups) against the
    Link's duplicate rate on the data's way.

    A receiver answers a segment it already has with a D-SACK (RFC 2883; Linux's default), and the sender counts the
    segments those covered (dsack_dups), its own needless resends among them: so the duplicates the path made lie
    between dsack_dups less the sender's retransmissions and dsack_dups. Judged, as loss is, on the binomial spread
    (widened by the correlation) of netem's expected draw for the segments sent.
    """

    asked: float
    correlation: float
    expected: float  # what netem's generator makes of the asked rate at that correlation
    segments: int  # data segments the sender sent (segs_out)
    dsacked: int  # segments its receiver reported as duplicates (dsack_dups)
    resent: int  # segments the sender resent (total_retrans): duplicates of its own making, at most

    def _off(self, count: float) -> bool:
        z = _z(count, self.segments, self.expected, self.correlation)
        rate = count / self.segments
        return z is not None and abs(z) > Z_LIMIT and abs(rate - self.expected) > MIN_RELATIVE * self.expected

    @property
    def too_few(self) -> bool:
        """Even counting every D-SACK as the path's, fewer duplicates than netem's draw explains."""
        return self.dsacked < self.segments * self.expected and self._off(self.dsacked)

    @property
    def too_many(self) -> bool:
        """Even counting every resend as D-SACKed, more duplicates than netem's draw explains."""
        least = max(0, self.dsacked - self.resent)
        return least > self.segments * self.expected and self._off(least)

    @property
    def as_configured(self) -> bool:
        return not (self.too_few or self.too_many)

    @property
    def key(self) -> tuple:
        return ("duplicate", self.segments, self.dsacked)

    @property
    def likely_cause(self) -> str:
        if self.too_few and self.expected < self.asked:
            return (
                f"netem's correlated draw applies {self.expected * 100:.3g}% for {self.asked * 100:.3g}% at "
                f"{self.correlation * 100:.3g}% correlation (docs/design.md, pitfall 13), and fewer still came"
            )
        if self.too_few:
            return (
                "the path did not duplicate as asked: the qdisc there is not the one asked for, or the receiver "
                "sends no D-SACKs (net.ipv4.tcp_dsack or tcp_sack off)"
            )
        return "more duplicates than asked: a second netem on the path, or a receiver that D-SACKs for another reason"

    def describe(self) -> str:
        least = max(0, self.dsacked - self.resent)
        share = f"{self.dsacked / self.segments * 100:.3g}%"
        if least != self.dsacked:
            share = f"{least / self.segments * 100:.3g}-{share}"
        resent = f", {self.resent} of them perhaps its own resends" if self.resent else ""
        line = (
            f"data duplicated {share}: {self.dsacked} of {self.segments} segments D-SACKed by the receiver{resent}, "
            f"{_asked(self.asked, self.correlation, self.expected)}"
        )
        return _judged(line, self)


def applied_duplicate(way, sender_info: dict) -> AppliedDuplicate | None:
    """The duplicates the data's way (a OneWay asked to duplicate) made of a flow's segments, from its sender's final
    TCP_INFO; None where nothing can be judged (no duplicate asked, a changing way, a kernel without dsack_dups)."""
    if way is None or not way.duplicate or way.changes:
        return None
    segments, dsacked = sender_info.get("segs_out"), sender_info.get("dsack_dups")
    if not segments or dsacked is None:
        return None
    return AppliedDuplicate(
        asked=way.duplicate,
        correlation=way.duplicate_correlation,
        expected=effective_rate(way.duplicate, way.duplicate_correlation),
        segments=segments,
        dsacked=dsacked,
        resent=sender_info.get("total_retrans") or 0,
    )


@dataclass(frozen=True)
class AppliedReorder:
    """Whether a flow's sender saw its data reordered (TCP_INFO reord_seen) on a way asked to reorder.

    netem sends a reordered packet at once while the others wait out the delay, so it overtakes every packet in the
    delay line; the sender learns of it when a hole below a SACKed segment fills without a resend, and counts
    detections, not packets (a reordered packet that overtook 16 others was counted ~15 times: docs/reports.md). So
    only "none at all" is judged: zero where netem's draw expects at least MIN_EXPECTED reordered packets, each
    overtaking two or more.
    """

    asked: float
    correlation: float
    expected: float  # reordered packets per packet, netem's draw (and its gap) considered
    segments: int
    seen: int  # reordering events the sender saw

    @property
    def as_configured(self) -> bool:
        return self.seen > 0 or self.segments * self.expected < MIN_EXPECTED

    @property
    def key(self) -> tuple:
        return ("reorder", self.segments, self.seen)

    @property
    def likely_cause(self) -> str:
        return "no packet overtook another: the qdisc on the path is not the one asked for, or it has no delay to skip"

    def describe(self) -> str:
        line = (
            f"data reordered: the sender detected reordering {self.seen} time(s) over {self.segments} segments "
            f"(about {self.segments * self.expected:.0f} reordered packets expected), "
            f"{_asked(self.asked, self.correlation, self.expected)}"
        )
        return _judged(line, self)


def applied_reorder(way, sender_info: dict) -> AppliedReorder | None:
    """The reordering the data's way (a OneWay asked to reorder) made of a flow's segments, from its sender's final
    TCP_INFO; None where nothing can be judged (none asked, a changing way, no delay line at least two packets deep
    for a packet to overtake, a kernel without reord_seen)."""
    if way is None or not way.reorder or way.changes or not way.delay_s:
        return None
    if way.delay_s * (way.rate_bps or 1e9) < 2 * _FRAME_BYTES * 8:
        return None
    segments, seen = sender_info.get("segs_out"), sender_info.get("reord_seen")
    if not segments or seen is None:
        return None
    per_packet = effective_rate(way.reorder, way.reorder_correlation) / (way.gap or 1)
    return AppliedReorder(
        asked=way.reorder, correlation=way.reorder_correlation, expected=per_packet, segments=segments, seen=seen
    )


def _asked(asked: float, correlation: float, expected: float) -> str:
    """'asked 2% with 25% correlation (netem draws 0.005%)'."""
    drawn = f" with {correlation * 100:.3g}% correlation (netem draws {expected * 100:.3g}%)" if correlation else ""
    return f"asked {asked * 100:.3g}%{drawn}"


def _judged(line: str, check) -> str:
    """A check's line, led by 'impairment not as configured' and followed by its likely cause where it is not."""
    return line if check.as_configured else f"impairment not as configured: {line}; {check.likely_cause}"


def others_packets(qdiscs: dict, shaped_ways: dict, own: dict, *, share: float = SHARED_SHARE) -> int:
    """Packets of other traffic the path's shapers carried beside a connection's own, the most on any of them, or 0
    below share (SHARED_SHARE unless given) and SHARED_MIN of its own.

    qdiscs and shaped_ways as applied_losses takes them; own: {"toward_client": n, "toward_server": n}, the segments
    the connection's end on that side sent (TCP_INFO segs_out; a qdisc counts a GSO packet's segments too).
    """
    most = 0
    for ifname, (direction, _way) in shaped_ways.items():
        mine = own.get(direction)
        if mine is None:
            continue
        # What reached the shaper: what it passed and what it dropped. A connection's own overflow drops count in its
        # segs_out, and against the passed packets alone they hid another flow's: two reno flows read as one.
        roots = [q for q in qdiscs.get(ifname) or [] if q.get("parent") == _TC_H_ROOT]
        offered = sum(q.get("packets", 0) + q.get("drops", 0) for q in roots)
        others = offered - mine
        if others > max(SHARED_MIN, share * mine):
            most = max(most, others)
    return most


def applied_delay(link, min_rtt_s, *, download, slack_s=0.0, others_packets=0):
    """The AppliedDelay of a flow on link (its Link; download: data toward the client), or None where the floor says
    nothing: no delay asked, no min_rtt, or a link that changes while the flow runs (its phases are judged apart).
    others_packets: other traffic its shapers carried (others_packets()); then only a floor too low is judged."""
    if link is None or min_rtt_s is None:
        return None
    forward, back = (link.toward_client, link.toward_server) if download else (link.toward_server, link.toward_client)
    if forward.changes or back.changes or not (forward.delay_s or back.delay_s):
        return None
    below = 0.0
    for way in (forward, back):
        if way.reorder:
            below += way.delay_s  # netem sends the reordered packets at once
        elif way.distribution != "uniform":
            below += 4 * way.jitter_s  # a table's tail reaches past the jitter
        else:
            below += way.jitter_s
    sending = sum(
        nbytes * 8 / way.rate_bps for nbytes, way in ((_FRAME_BYTES, forward), (_ACK_BYTES, back)) if way.rate_bps
    )
    return AppliedDelay(
        asked_s=forward.delay_s + back.delay_s,
        below_s=min(below, forward.delay_s + back.delay_s),
        sending_s=sending,
        slack_s=slack_s,
        floor_s=min_rtt_s,
        others_packets=others_packets,
    )


class RateRun(NamedTuple):
    """One run of standing queue the applied rate was measured over: where it began (s from the flow's first
    sample), its length and the payload rate the ACKs came back at."""

    start_s: float
    seconds: float
    bps: float


@dataclass(frozen=True)
class AppliedRate:
    """The payload rate the flow's ACKs came back at while its queue stood, against the Link's payload rate."""

    asked_bps: float  # the Link's rate, in payload terms (1448 of every 1514 bytes)
    measured_bps: float
    standing_s: float  # the time the queue stood, over which it was measured
    slack: float = 0.0  # a software-emulated guest's shaper falls behind: its known shortfall allowed on top
    #: The runs of standing queue it was measured over, so a mismatch names them.
    runs: tuple[RateRun, ...] = ()

    @property
    def as_configured(self) -> bool:
        return abs(self.measured_bps / self.asked_bps - 1) <= RATE_TOLERANCE + self.slack

    @property
    def key(self) -> tuple:
        return ("rate", round(self.asked_bps), round(self.measured_bps))

    @property
    def likely_cause(self) -> str:
        if self.measured_bps < self.asked_bps:
            return (
                "the shaper sends slower than asked: a rate changed behind the lab's back, a second shaper on the "
                "path, or a CPU too slow or too busy for this rate (a one-CPU guest at 1 Gbit/s: docs/reports.md, "
                '"Verdicts you can trust")'
            )
        return "the shaper sends faster than asked: it is not the one the Link built, or its rate was changed"

    def describe(self) -> str:
        line = (
            f"rate {format_rate(self.measured_bps)} of payload while the queue stood ({self.standing_s:.2f} s), "
            f"asked {format_rate(self.asked_bps)} (allowed ±{(RATE_TOLERANCE + self.slack):.0%})"
        )
        if not self.as_configured:
            runs = ", ".join(f"{run.start_s:.2f}+{run.seconds:.2f} s at {format_rate(run.bps)}" for run in self.runs)
            line = f"impairment not as configured: {line}, over runs {runs}; {self.likely_cause}"
        return line


class RateSample(NamedTuple):
    """One sender sample, as the rate check reads it."""

    t_s: float
    bytes_acked: int
    in_flight_bytes: float
    min_rtt_s: float
    #: TCP_INFO busy_time less rwnd_limited: the time the sender had data and a window to send it in.
    sending_s: float
    #: TCP_INFO total_retrans and ca_state (0: open, no hole the receiver reported).
    total_retrans: int
    ca_state: int
    #: The window the receiver advertised (TCP_INFO snd_wnd), in bytes.
    receive_window: int
    #: The congestion window (TCP_INFO snd_cwnd), in segments.
    cwnd: int


def applied_rate(link, samples, *, download, mss_bytes, others_packets=0, slack=0.0):
    """The AppliedRate of a flow on link from its sender's RateSamples, or None where the rate says nothing: no rate
    asked, a policer, an AQM, loss asked, a changing link, other traffic, or under MIN_STANDING_S of standing queue."""
    if link is None:
        return None
    way = link.toward_client if download else link.toward_server
    queue = way.queue.kind if way.queue is not None else "pfifo"
    if not way.rate_bps or way.police_bps or queue not in ("pfifo", "bfifo") or way.changes or others_packets:
        return None
    if way.loss or way.loss_model is not None or link.toward_server.changes or link.toward_client.changes:
        return None
    asked = link_goodput(way.rate_bps, mss_bytes)

    def standing_at(sample):
        path = asked / 8 * sample.min_rtt_s
        return sample.in_flight_bytes >= path + max(_STANDING_SEGMENTS * mss_bytes, _STANDING_SHARE * path)

    # Runs of consecutive intervals with the queue standing at every sample and no loss to recover from: after a
    # queue overflow the cumulative ACK stalls behind a hole and jumps when it is filled, so the rate reads low and
    # then high (docs/reports.md, "Verdicts you can trust"), and lost segments still count as unacked.
    runs: list[_StandingRun] = []
    run = None
    for first, last in zip(samples, samples[1:]):
        usable = None not in first and None not in last and last.t_s > first.t_s
        clean = usable and first.ca_state == last.ca_state == 0 and first.total_retrans == last.total_retrans
        # A receive window that shrinks is a receiver falling behind: its stack, pruning a filling buffer, paces the
        # ACKs with the window still open and the segments queued in its own backlog, not at the shaper
        # (docs/reports.md, "Verdicts you can trust").
        clean = clean and last.receive_window + mss_bytes >= first.receive_window
        # A queue building as fast as it drains (slow start) is not one that stands: see _BUILDING_SHARE. Read from
        # the congestion window, which a sample cannot catch between an ACK and the segments it releases.
        acked_segments = (last.bytes_acked - first.bytes_acked) / mss_bytes
        clean = clean and last.cwnd - first.cwnd < _BUILDING_SHARE * acked_segments + 1
        if clean and standing_at(first) and standing_at(last):
            run = run or _StandingRun(first.t_s - samples[0].t_s)
            run.acked_bytes += last.bytes_acked - first.bytes_acked
            run.seconds += last.t_s - first.t_s
            run.sending_s += last.sending_s - first.sending_s
        elif run is not None:
            runs.append(run)
            run = None
    if run is not None:
        runs.append(run)
    # Sending all along a run: a queue at each sample of a flow its receiver held in between (curl --limit-rate's
    # reader) is no proof the shaper was busy. Judged over whole runs of MIN_RUN_S or more, as the kernel counts
    # that time in jiffies (10 ms where HZ is 100: a User-Mode Linux guest), and a run's ends, picked by the queue
    # they show, misplace up to a sample's worth of ACKs.
    kept = [run for run in runs if run.seconds >= MIN_RUN_S and run.sending_s >= _BUSY_SHARE * run.seconds]
    acked = sum(run.acked_bytes for run in kept)
    standing = sum(run.seconds for run in kept)
    if standing < MIN_STANDING_S or acked <= 0:
        return None
    return AppliedRate(
        asked_bps=asked,
        measured_bps=acked * 8 / standing,
        standing_s=standing,
        slack=slack,
        runs=tuple(RateRun(run.start_s, run.seconds, run.acked_bytes * 8 / run.seconds) for run in kept),
    )


@dataclass
class _StandingRun:
    """Consecutive sample intervals with the queue standing, as they add up: where it began (s from the first
    sample), its length, the payload acknowledged and the time the sender was sending over it."""

    start_s: float
    seconds: float = 0.0
    acked_bytes: float = 0.0
    sending_s: float = 0.0
