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

Elsewhere, where the literature gives no single figure, no number is claimed (`Share.bps` is None, `why` says so): flows of
different congestion controls (bbr beside cubic depends on the buffer's depth: Ware et al., "Modeling BBR's
interactions with loss-based congestion control", IMC 2019) and flows of different RTTs (Reno-family throughput
goes as 1/RTT^a with a between 1 and 2 through a drop-tail queue: Lakshman & Madhow, 1997; CUBIC's cubic region
as RTT^-1/4, its Reno-friendly region as 1/RTT: RFC 9438 section 5.1, which applies depends on the BDP).
"""

from __future__ import annotations

from dataclasses import dataclass

from .units import format_rate

__all__ = ["Contender", "Share", "bottleneck_shares", "water_fill", "RTT_SPREAD", "FLOW_QUEUEING_KINDS"]

#: RTTs within this fraction of each other count as one RTT (an access hop of a millisecond beside a 40 ms path).
RTT_SPREAD = 0.10
#: Queue kinds that keep a queue per flow and serve them in turn (DRR): flows share equally whatever their cc or RTT.
FLOW_QUEUEING_KINDS = ("fq_codel", "cake", "fq_pie", "fq")


@dataclass(frozen=True)
class Contender:
    """One TCP flow on a shared bottleneck, as the share needs it: its own bound alone (None: only the bottleneck
    limits it), its congestion control and its RTT."""

    own_bps: float | None
    cc: str
    rtt_s: float


@dataclass(frozen=True)
class Share:
    """A flow's share of a bottleneck: bps (None where no established model gives one), why, and the flows on it."""

    bps: float | None
    why: str
    flows: int

    @property
    def established(self) -> bool:
        return self.bps is not None


def water_fill(capacity_bps: float, demands: list[float | None]) -> list[float]:
    """Max-min fair allocation of capacity among flows whose own demands cap them (None: no cap of its own)."""
    caps = [float("inf") if demand is None else demand for demand in demands]
    order = sorted(range(len(demands)), key=caps.__getitem__)
    shares = [0.0] * len(demands)
    left, waiting = capacity_bps, len(demands)
    for i in order:
        shares[i] = min(caps[i], left / waiting)
        left -= shares[i]
        waiting -= 1
    return shares


def bottleneck_shares(
    capacity_bps: float,
    contenders: list[Contender],
    *,
    unresponsive: tuple[float, ...] | list[float] = (),
    what: str = "the bottleneck",
    fair_queue: str | None = None,
) -> list[Share]:
    """Each contender's Share of capacity_bps (TCP goodput the bottleneck carries) beside unresponsive streams (each
    one's goodput-equivalent rate), which take their rate first from a shared FIFO. fair_queue: the bottleneck's
    queue kind when it queues per flow (FLOW_QUEUEING_KINDS): then a stream is one more flow, capped by its rate,
    and any mix of ccs and RTTs shares equally."""
    n = len(contenders)
    own = [c.own_bps for c in contenders]
    if fair_queue is not None:
        shares = water_fill(capacity_bps, own + list(unresponsive))[:n]
        streams = f" and {len(unresponsive)} UDP stream(s)" if unresponsive else ""
        why = f"a max-min fair share of {format_rate(capacity_bps)} on {what} among {n} flows{streams}"
        return _shares(shares, own, f"{why} ({fair_queue} queues per flow)", n)
    ccs = sorted({c.cc for c in contenders})
    if len(ccs) > 1:
        why = (
            f"no established model for {' beside '.join(ccs)} sharing {what} ({n} flows): the split depends on the "
            "buffer and the algorithms' dynamics (e.g. bbr beside cubic: Ware et al., IMC 2019)"
        )
        return [Share(None, why, n)] * n
    rtts = [c.rtt_s for c in contenders]
    if max(rtts) > min(rtts) * (1 + RTT_SPREAD):
        why = (
            f"no established model for {ccs[0]} flows of different RTTs ({', '.join(f'{r * 1e3:.3g} ms' for r in rtts)}) "
            f"sharing {what}: throughput goes as 1/RTT^a, a between 1 and 2 through drop-tail (Lakshman & Madhow 1997)"
        )
        return [Share(None, why, n)] * n
    taken = min(capacity_bps, sum(unresponsive))
    beside = f" after {format_rate(taken)} of unresponsive traffic" if taken else ""
    left = capacity_bps - taken
    why = f"a max-min fair share of {format_rate(left)} on {what}{beside} among {n} {ccs[0]} flows"
    return _shares(water_fill(left, own), own, why, n)


def _shares(shares: list[float], own: list[float | None], why: str, n: int) -> list[Share]:
    """Shares with one why, each noting where the flow's own bound is what it gets."""
    return [
        Share(
            bps, why + (f" (its own bound, {format_rate(cap)}, is less)" if cap is not None and bps >= cap else ""), n
        )
        for bps, cap in zip(shares, own)
    ]
