"""Shares of one bottleneck: what each of several flows should get, from max-min fairness and each flow's own bounds.

Unresponsive traffic (a UDP stream) takes its rate first, up to the link's; what is left is shared among the TCP
flows max-min fair (Bertsekas & Gallager, Data Networks, 2nd ed., section 6.5.2: water-filling), each flow capped
by its own bound alone (its receive window or send buffer over its RTT, its application, an access link slower
than the bottleneck). Loss-based flows of one congestion control and one RTT converge to equal shares (Chiu & Jain,
"Analysis of the increase and decrease algorithms for congestion avoidance", 1989, for AIMD; CUBIC's window
function depends on the time since the last loss, so equal-RTT CUBIC flows converge the same way, RFC 9438
section 5).

A per-flow fair queue at the bottleneck (fq_codel, cake, fq_pie, fq) serves each flow's own queue in turn, by deficit
round robin (Shreedhar & Varghese, "Efficient fair queueing using deficit round robin", 1995): each backlogged flow
gets an equal share whatever its congestion control or RTT, so there the max-min share holds for any mix.

Reno flows of different RTTs get a range (`Share.low_bps` to `high_bps`, `bps` None): each takes capacity in
proportion to 1/RTT^a, RTTs counted with the queue they all wait in, a from 1 where each flow's losses are
independent of the others (Mathis et al., "The macroscopic behavior of the TCP congestion avoidance algorithm",
1997) to 2 where a drop-tail queue drops from all of them at once (Lakshman & Madhow, "The performance of TCP/IP
for networks with high bandwidth-delay products and random loss", 1997). The standing queue evens RTTs out:
through drop-tail it ranges from full down to what one synchronized back-off by half of the whole pipe drains
(Appenzeller et al., "Sizing router buffers", 2004), through an AQM from empty to its target. Flows that ran
together for fewer than CONVERGED_EPOCHS congestion epochs get no number: their shares were still converging.

Elsewhere, where the literature gives no figure, no number is claimed (`Share.bps` is None, `why` says so): flows of
different congestion controls (bbr beside cubic depends on the buffer's depth: Ware et al., "Modeling BBR's
interactions with loss-based congestion control", IMC 2019; the why says which way it goes through drop-tail, after
Hock, Bless & Zitterbart, ICNP 2017: SHALLOW_BDPS, DEEP_BDPS), or of another congestion control and different RTTs
(CUBIC's bracket, RTT^-1/4 at one loss rate by RFC 9438 section 5.1 to Reno's, did not hold: RTT_EXPONENTS).
"""

from __future__ import annotations

from dataclasses import dataclass

from .units import format_rate

__all__ = [
    "Contender",
    "Share",
    "bottleneck_shares",
    "water_fill",
    "weighted_fill",
    "RTT_SPREAD",
    "RTT_EXPONENTS",
    "FLOW_QUEUEING_KINDS",
    "WINDOW_GROWTH_SEGMENTS",
    "regrown_rate",
]

#: RTTs within this fraction of each other count as one RTT (an access hop of a millisecond beside a 40 ms path).
RTT_SPREAD = 0.10
#: Queue kinds that keep a queue per flow and serve them in turn (DRR): flows share equally whatever their cc or RTT.
FLOW_QUEUEING_KINDS = ("fq_codel", "cake", "fq_pie", "fq")
#: Per congestion control: the exponents a of throughput ~ 1/RTT^a that bracket the literature (module doc).
#: CUBIC is not here: its bracket (RTT^-1/4 at one loss rate, RFC 9438 section 5.1, to Reno's 1/RTT^2) did not hold
#: (examples/test_bufferbloat.py: a 160 ms cubic flow beside a 10 ms one through a 200-packet FIFO got up to 61% of
#: the link where the bracket's top was 47%).
RTT_EXPONENTS = {"reno": (1.0, 2.0)}
#: Congestion epochs reno flows need together before a share is claimed for them (a range for different RTTs, equal
#: shares for one): a run shorter than that is still converging (two reno flows at 10 and 80 ms behind a 600 ms
#: FIFO: the long one had 0.39 of 19.1 Mbit/s after 8 s, where an epoch takes ~170 s).
CONVERGED_EPOCHS = 2
#: The window a loss-based cc keeps after a loss, for its congestion epochs: Reno 1/2 (RFC 5681), CUBIC 0.7 (RFC 9438
#: section 4.6).
BETAS = {"reno": 0.5, "cubic": 0.7}
#: Drop-tail buffers (in BDPs) below which bbr takes most of the link from loss-based flows, and above which they
#: take most from it (Hock, Bless & Zitterbart, "Experimental evaluation of BBR congestion control", ICNP 2017:
#: 0.8 and 8 BDP; here 0.48 BDP gave bbr 0.86-0.95 and 18 BDP 0.12-0.19 of the link beside one cubic flow, UML 6.1
#: and 6.12).
SHALLOW_BDPS = 1.0
DEEP_BDPS = 4.0
#: Segments per round trip a congestion control's window grows by in congestion avoidance: Reno one (RFC 5681 section
#: 3.1; Linux counts the segments acknowledged, so delayed ACKs do not halve it). A flow left more of the link (the
#: others ended) takes it that fast, not at once: a reno flow at 80 ms gains 1.8 Mbit/s per second. CUBIC is not
#: here: past its last maximum its window grows with the cube of the time, which can take a freed link in a second.
WINDOW_GROWTH_SEGMENTS = {"reno": 1.0}
#: CUBIC's constant (RFC 9438 section 4.2) and the segment the epochs are counted in.
CUBIC_C = 0.4
SEGMENT_BYTES = 1448


@dataclass(frozen=True)
class Contender:
    """One TCP flow on a shared bottleneck, as the share needs it: its own bound alone (None: only the bottleneck
    limits it), its congestion control and its RTT."""

    own_bps: float | None
    cc: str
    rtt_s: float


@dataclass(frozen=True)
class Share:
    """A flow's share of a bottleneck: bps (None where no established model gives one figure), why, the flows on it,
    and the range low_bps to high_bps where the literature brackets it (flows of different RTTs)."""

    bps: float | None
    why: str
    flows: int
    low_bps: float | None = None
    high_bps: float | None = None

    @property
    def established(self) -> bool:
        return self.bps is not None

    @property
    def ranged(self) -> bool:
        return self.bps is None and self.low_bps is not None and self.high_bps is not None

    def describe(self) -> str:
        """'9.56 Mbit/s', '1.2 Mbit/s to 3.4 Mbit/s' or 'not predicted'."""
        if self.bps is not None:
            return format_rate(self.bps)
        if self.ranged:
            return f"{format_rate(self.low_bps)} to {format_rate(self.high_bps)}"
        return "not predicted"


def water_fill(capacity_bps: float, demands: list[float | None]) -> list[float]:
    """Max-min fair allocation of capacity among flows whose own demands cap them (None: no cap of its own)."""
    return weighted_fill(capacity_bps, [1.0] * len(demands), demands)


def weighted_fill(capacity_bps: float, weights: list[float], caps: list[float | None]) -> list[float]:
    """capacity split in proportion to weights, each flow capped by its own bound (None: none); what a capped flow
    leaves goes to the others, in proportion again."""
    limits = [float("inf") if cap is None else cap for cap in caps]
    shares = [0.0] * len(weights)
    free, left = set(range(len(weights))), capacity_bps
    while free:
        total = sum(weights[i] for i in free)
        capped = [i for i in free if limits[i] <= left * weights[i] / total]
        if not capped:
            for i in free:
                shares[i] = left * weights[i] / total
            break
        for i in capped:
            shares[i] = limits[i]
            left -= limits[i]
            free.discard(i)
    return shares


def _rtt_ranges(
    capacity_bps: float,
    contenders: list[Contender],
    cc: str,
    queue_s: float | None,
    aqm_s: float | None,
    what: str,
    over_s: float | None,
) -> list[Share]:
    """Shares as ranges for flows of one loss-based cc and different RTTs (module doc), over the exponents and the
    standing queues the literature allows."""
    (a_low, a_high), beta = RTT_EXPONENTS[cc], BETAS[cc]
    own = [c.own_bps for c in contenders]
    rtts = [c.rtt_s for c in contenders]
    if aqm_s is not None:
        q_low, q_high, queue = 0.0, aqm_s, f"its AQM holding 0 to {aqm_s * 1e3:.3g} ms"
    elif queue_s:
        # A queue the flows fill drains, after one back-off of all, by (1 - beta) of the whole pipe; a flow its own
        # bound holds below the link may leave it emptier.
        drained = max(0.0, queue_s - (1 - beta) * (queue_s + max(rtts)))
        q_low, q_high = (0.0 if any(x is not None and x < capacity_bps for x in own) else drained), queue_s
        queue = f"a standing queue of {q_low * 1e3:.3g} to {q_high * 1e3:.3g} ms"
    else:
        q_low = q_high = 0.0
        queue = "no standing queue"
    steps = 8
    found = [
        weighted_fill(capacity_bps, [(r + q) ** -a for r in rtts], own)
        for a in (a_low + (a_high - a_low) * k / steps for k in range(steps + 1))
        for q in (q_low + (q_high - q_low) * k / steps for k in range(steps + 1))
    ]
    lows = [min(row[i] for row in found) for i in range(len(rtts))]
    highs = [max(row[i] for row in found) for i in range(len(rtts))]
    rtt_list = ", ".join(f"{r * 1e3:.3g} ms" for r in rtts)
    epoch = max(congestion_epoch_s(cc, (low + high) / 2, r + q_high, beta) for low, high, r in zip(lows, highs, rtts))
    if over_s is not None and over_s < CONVERGED_EPOCHS * epoch:
        why = (
            f"no established model for {cc} flows of different RTTs ({rtt_list}) that ran together "
            f"{over_s:.3g} s on {what}: their shares converge over several congestion epochs (here ~{epoch:.3g} s "
            f"each, {queue}); run them {CONVERGED_EPOCHS * epoch:.3g} s or more, or with a shallower queue"
        )
        return [Share(None, why, len(contenders))] * len(contenders)
    why = (
        f"{cc} flows of different RTTs ({rtt_list}) sharing {format_rate(capacity_bps)} on {what}, {queue}: "
        f"throughput ~ 1/RTT^a, a from {a_low:g} to {a_high:g} (Mathis et al. 1997; Lakshman & Madhow 1997)"
    )
    return [Share(None, why, len(contenders), low, high) for low, high in zip(lows, highs)]


def regrown_rate(from_bps: float, to_bps: float, cc: str, rtt_s: float, seconds: float) -> tuple[float, float]:
    """(mean rate over `seconds`, rate at their end) of a flow at from_bps that is left to_bps: its window grows
    toward it by WINDOW_GROWTH_SEGMENTS per round trip, counted at the path's RTT without queue (the fastest it can:
    the low end of a share); at once for a cc not listed, or where it is left less."""
    segments = WINDOW_GROWTH_SEGMENTS.get(cc)
    if segments is None or to_bps <= from_bps or rtt_s <= 0 or seconds <= 0:
        return to_bps, to_bps
    growth = segments * SEGMENT_BYTES * 8 / rtt_s**2  # bit/s gained per second: a segment more per round trip
    reach_s = (to_bps - from_bps) / growth
    if seconds <= reach_s:
        end = from_bps + growth * seconds
        return (from_bps + end) / 2, end
    return (reach_s * (from_bps + to_bps) / 2 + (seconds - reach_s) * to_bps) / seconds, to_bps


def congestion_epoch_s(cc: str, bps: float, rtt_s: float, beta: float) -> float:
    """Seconds between a flow's losses at rate bps and RTT rtt_s: Reno regrows the (1 - beta) of its window it lost
    by a segment per round trip; CUBIC regains it K = cbrt(W (1 - beta) / C) seconds after a loss (RFC 9438 section
    4.2, C 0.4), or sooner where its Reno-friendly estimate, 3 (1 - beta) / (1 + beta) segments per round trip,
    grows faster (section 4.3)."""
    window = bps * rtt_s / 8 / SEGMENT_BYTES
    lost_segments = (1 - beta) * window
    if cc != "cubic":
        return lost_segments * rtt_s
    friendly = lost_segments / (3 * (1 - beta) / (1 + beta)) * rtt_s
    return min(friendly, (lost_segments / CUBIC_C) ** (1 / 3))


def _mixed_why(ccs: list[str], queue_s: float | None, aqm_s: float | None, rtt_s: float) -> str:
    """Why flows of different ccs get no share, with the direction the literature gives for bbr beside loss-based
    flows through drop-tail, by the buffer's depth in BDPs of the shortest RTT."""
    general = "the split depends on the buffer and the algorithms' dynamics"
    if "bbr" not in ccs or not set(ccs) - {"bbr"} <= set(BETAS) or aqm_s is not None or not queue_s or rtt_s <= 0:
        return f"{general} (e.g. bbr beside cubic: Ware et al., IMC 2019)"
    bdps = queue_s / rtt_s
    depth = f"a drop-tail buffer of {bdps:.2g} BDP"
    if bdps < SHALLOW_BDPS:
        return f"{general}; through {depth} bbr takes most of the link (Hock, Bless & Zitterbart, ICNP 2017)"
    if bdps > DEEP_BDPS:
        return (
            f"{general}; through {depth} the loss-based flows take most of the link while bbr's window is capped at "
            "twice its estimate of the BDP (Hock, Bless & Zitterbart, ICNP 2017); once its 10 s min-RTT filter "
            "takes in the standing queue that cap, not the number of loss-based flows, sets bbr's share "
            "(Ware et al., IMC 2019)"
        )
    return f"{general}; through {depth}, between the shallow and deep buffers the literature measured (Hock et al., ICNP 2017)"


def bottleneck_shares(
    capacity_bps: float,
    contenders: list[Contender],
    *,
    unresponsive: tuple[float, ...] | list[float] = (),
    what: str = "the bottleneck",
    fair_queue: str | None = None,
    queue_s: float | None = None,
    aqm_s: float | None = None,
    over_s: float | None = None,
) -> list[Share]:
    """Each contender's Share of capacity_bps (TCP goodput the bottleneck carries) beside unresponsive streams (each
    one's goodput-equivalent rate), which take their rate first from a shared FIFO. fair_queue: the bottleneck's
    queue kind when it queues per flow (FLOW_QUEUEING_KINDS): then a stream is one more flow, capped by its rate,
    and any mix of ccs and RTTs shares equally. queue_s: the bottleneck's queue when full, in seconds at its rate;
    aqm_s: the delay its AQM holds the queue near (None: a drop-tail queue); both only range RTT-unequal shares.
    over_s: how long the flows ran together (None: long enough to converge)."""
    n = len(contenders)
    own = [c.own_bps for c in contenders]
    if fair_queue is not None:
        shares = water_fill(capacity_bps, own + list(unresponsive))[:n]
        streams = f" and {len(unresponsive)} UDP stream(s)" if unresponsive else ""
        why = f"a max-min fair share of {format_rate(capacity_bps)} on {what} among {n} flows{streams}"
        return _shares(shares, own, f"{why} ({fair_queue} queues per flow)", n)
    ccs = sorted({c.cc for c in contenders})
    if len(ccs) > 1:
        why = f"no established model for {' beside '.join(ccs)} sharing {what} ({n} flows): " + _mixed_why(
            ccs, queue_s, aqm_s, min(c.rtt_s for c in contenders)
        )
        return [Share(None, why, n)] * n
    rtts = [c.rtt_s for c in contenders]
    taken = min(capacity_bps, sum(unresponsive))
    beside = f" after {format_rate(taken)} of unresponsive traffic" if taken else ""
    left = capacity_bps - taken
    if max(rtts) > min(rtts) * (1 + RTT_SPREAD):
        if ccs[0] in RTT_EXPONENTS:
            return _rtt_ranges(left, contenders, ccs[0], queue_s, aqm_s, what + beside, over_s)
        why = (
            f"no established model for {ccs[0]} flows of different RTTs ({', '.join(f'{r * 1e3:.3g} ms' for r in rtts)}) "
            f"sharing {what}: the literature brackets Reno's RTT dependence, not {ccs[0]}'s"
            + (
                " (CUBIC's bracket, RTT^-1/4 to Reno's, did not hold through a deep FIFO: docs/model.md)"
                if ccs[0] == "cubic"
                else ""
            )
        )
        return [Share(None, why, n)] * n
    fills = water_fill(left, own)
    # Only flows no bound of their own holds compete for the rest: a paced flow beside one bulk flow leaves nothing
    # to converge.
    free = [(fill, rtt) for fill, cap, rtt in zip(fills, own, rtts) if cap is None or cap > fill * (1 + 1e-9)]
    if len(free) >= 2:
        unsettled = _unsettled(ccs[0], free[0][0], max(r for _, r in free), queue_s, aqm_s, over_s)
        if unsettled:
            why = (
                f"no established model for {len(free)} {ccs[0]} flows that ran together {over_s:.3g} s on "
                f"{what}{beside}: {unsettled}"
            )
            return [Share(None, why, n)] * n
    why = f"a max-min fair share of {format_rate(left)} on {what}{beside} among {n} {ccs[0]} flows"
    return _shares(fills, own, why, n)


def _unsettled(
    cc: str, bps: float, rtt_s: float, queue_s: float | None, aqm_s: float | None, over_s: float | None
) -> str:
    """Why flows of one cc and one RTT had not converged to equal shares in over_s ("" where they had, or where no
    epoch is known). Reno's per-ACK AIMD converges over congestion epochs (Chiu & Jain 1989), each as long as the
    window it regrows takes in round trips counted with the queue; a deep drop-tail queue makes those minutes, and
    in it one flow can hold the queue from the others (lock-out: RFC 7567 section 2.1). CUBIC regains its window K
    seconds after a loss (congestion_epoch_s). Measured under UML 6.1 and 6.12, two flows for 8 s through a
    1000-packet FIFO behind 20 Mbit/s at 10 ms: reno 17.7-18.8 against 0.34-1.46 Mbit/s, cubic 14.3-15.6 against
    3.8-5.1 (Jain 0.73-0.82), where equal shares were claimed; through fq_codel both split 0.98-1.00 of equal."""
    if over_s is None or cc not in BETAS:
        return ""
    beta = BETAS[cc]
    queue = aqm_s if aqm_s is not None else queue_s or 0.0
    epoch = congestion_epoch_s(cc, bps, rtt_s + queue, beta)
    if over_s >= CONVERGED_EPOCHS * epoch:
        return ""
    if aqm_s is not None:
        held = f"its AQM holding ~{aqm_s * 1e3:.3g} ms"
    else:
        held = f"{queue * 1e3:.3g} ms of drop-tail queue, which can lock a flow out meanwhile: RFC 7567, section 2.1"
    return (
        f"{cc} flows converge to equal shares over congestion epochs (Chiu & Jain 1989; RFC 9438, section 5), here "
        f"~{epoch:.3g} s each "
        f"({held}); run them {CONVERGED_EPOCHS * epoch:.3g} s or more, or through a shallower queue or a per-flow "
        "one (fq_codel)"
    )


def _shares(shares: list[float], own: list[float | None], why: str, n: int) -> list[Share]:
    """Shares with one why, each noting where the flow's own bound is what it gets."""
    return [
        Share(
            bps, why + (f" (its own bound, {format_rate(cap)}, is less)" if cap is not None and bps >= cap else ""), n
        )
        for bps, cap in zip(shares, own)
    ]
