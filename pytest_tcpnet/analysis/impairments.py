"""What a link applied, from its qdisc counters, against what it was asked: loss as the traffic met it.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["AppliedLoss", "applied_losses", "Z_LIMIT"]

#: Standard deviations beyond which a loss count is not chance: P < 1e-4 two-sided under a normal spread.
Z_LIMIT = 4.0
#: A mismatch must also be this large in rate (10%), so a huge sample does not flag a trivial difference.
MIN_RELATIVE = 0.10
#: Losses the asked rate must expect before a count can be judged (below it, 0 is not unusual).
MIN_EXPECTED = 8.0
_NETEM = "netem"


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

    @property
    def applied(self) -> float:
        return self.lost / self.offered if self.offered else 0.0

    def z(self, rate: float) -> float | None:
        """How many standard deviations the count sits from rate's expectation (None: too few to judge)."""
        expected = self.offered * rate
        if expected < MIN_EXPECTED or rate >= 1:
            return None
        lag = self.bursty or self.correlation
        dispersion = (1 + lag) / (1 - lag) if lag < 1 else float("inf")
        spread = math.sqrt(dispersion * expected * (1 - rate))
        return (self.lost - expected) / spread if spread else None

    def differs_from(self, rate: float) -> bool:
        """True when the applied loss is not what rate explains by chance."""
        z = self.z(rate)
        if z is None:
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
            f"({self.lost} of {self.offered} packets), {asked}"
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
            )
        )
    return found
