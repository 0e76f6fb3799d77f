"""Value types for what a test asks for: a Link (the path) and a Host (an endpoint).

Everything is validated when the object is built, so a bad spec fails before any
namespace exists, with a message naming the field and what is allowed.
"""

import dataclasses
import math
import re
import warnings
from dataclasses import dataclass

from .netem import NetemCorrelationWarning, correlation_distorts, effective_rate
from .queues import Queue, check_queue
from .schedule import SCHEDULABLE_FIELDS, Schedule
from .units import (
    MTU_FRAME_BYTES,
    format_rate,
    format_size,
    format_time,
    parse_fraction,
    parse_rate,
    parse_size,
    parse_time,
)
from .validation import check_integer, is_integer, refuse

__all__ = [
    "OneWay",
    "Link",
    "Host",
    "KNOWN_CONGESTION_CONTROLS",
    "HOST_GLOBAL_SYSCTLS",
    "MTU_FRAME_BYTES",
    "DISTRIBUTIONS",
    "distribution_table",
    "GilbertElliott",
    "Slot",
]


#: Congestion controls Linux has shipped; a name outside this set is a typo, not a missing module.
KNOWN_CONGESTION_CONTROLS = frozenset(
    {
        "reno",
        "cubic",
        "bbr",
        "bic",
        "cdg",
        "dctcp",
        "highspeed",
        "htcp",
        "hybla",
        "illinois",
        "lp",
        "nv",
        "scalable",
        "vegas",
        "veno",
        "westwood",
        "yeah",
    }
)

#: Sysctls under net.* that belong to the initial namespace only: a namespace cannot set
#: them (absent or read-only there; measured on 6.18), so a per-host value would be a lie.
HOST_GLOBAL_SYSCTLS = frozenset(
    {
        "net.core.rmem_max",
        "net.core.wmem_max",
        "net.core.rmem_default",
        "net.core.wmem_default",
        "net.core.default_qdisc",
        "net.core.netdev_max_backlog",
        "net.core.netdev_budget",
        "net.core.netdev_budget_usecs",
        "net.core.dev_weight",
        "net.core.busy_poll",
        "net.core.busy_read",
        "net.core.bpf_jit_enable",
        "net.core.max_skb_frags",
        "net.core.gro_normal_batch",
        "net.core.rps_sock_flow_entries",
        "net.core.flow_limit_table_len",
        "net.ipv4.tcp_mem",
        "net.ipv4.udp_mem",
        "net.ipv4.tcp_max_orphans",
        "net.ipv4.tcp_low_latency",
    }
)

_SYSCTL_NAME = re.compile(r"net(\.[A-Za-z0-9_\-]+)+")  # used with fullmatch: "$" would let "...\n" through
#: Newline, NUL and other control characters: a newline in a value would make the kernel take a second one.
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f]")
_MAX_SYSCTL_TEXT = 1024
_TRIPLE_SYSCTLS = {"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"}
_CC_SYSCTL = "net.ipv4.tcp_congestion_control"


@dataclass(frozen=True)
class OneWay:
    """What the router does to packets travelling in one direction (SI units)."""

    rate_bps: "float | None" = None
    delay_s: float = 0.0
    jitter_s: float = 0.0
    loss: float = 0.0
    reorder: float = 0.0
    duplicate: float = 0.0
    corrupt: float = 0.0
    queue_packets: "int | None" = None
    #: netem's correlations (0..1: how much each random draw depends on the previous one), its
    #: every-Nth-packet reordering, and the delay distribution's table ("uniform": netem's own).
    jitter_correlation: float = 0.0
    loss_correlation: float = 0.0
    reorder_correlation: float = 0.0
    duplicate_correlation: float = 0.0
    corrupt_correlation: float = 0.0
    gap: "int | None" = None
    distribution: str = "uniform"
    #: A loss model instead of independent losses (loss then holds its mean), and netem's slots.
    loss_model: "GilbertElliott | None" = None
    slot: "Slot | None" = None
    #: TCP ports whose traffic (to or from them) the impairment applies to; None: all traffic.
    ports: "tuple | None" = None
    #: The bottleneck's queue discipline (None: pfifo, or netem's own queue when netem is there).
    queue: "Queue | None" = None
    #: A token-bucket policer (drops above police_bps, bursts of police_burst_bytes pass) instead of, or before,
    #: a shaper.
    police_bps: "float | None" = None
    police_burst_bytes: "int | None" = None
    #: A changing link (model.Schedule): ((t_s, OneWay), ...), what this direction becomes at each later time.
    changes: tuple = ()

    @property
    def phases(self):
        """((t_s, OneWay), ...) from t=0: this direction as it starts, then each change."""
        return ((0.0, dataclasses.replace(self, changes=())),) + self.changes

    @property
    def effective_loss(self):
        """The share of packets netem really drops: the loss asked, or what its correlated draw makes of it
        (model/netem.py), or a Gilbert-Elliott model's mean."""
        if self.loss_model is None and self.loss_correlation:
            return effective_rate(self.loss, self.loss_correlation)
        return self.loss

    @property
    def needs_netem(self):
        """True when only netem can produce this (delay, jitter, loss, reorder, ...)."""
        return any(
            (
                self.delay_s,
                self.jitter_s,
                self.loss,
                self.reorder,
                self.duplicate,
                self.corrupt,
                self.gap,
                self.loss_model,
                self.slot,
            )
        )

    @property
    def is_unimpaired(self):
        """True when the router forwards this direction untouched."""
        return self.rate_bps is None and not self.needs_netem and self.queue_packets is None and self.police_bps is None

    def in_flight_packets(self, assumed_rate_bps=10e9):
        """Packets that sit in the delay line at full rate: the one-way BDP in packets."""
        rate = self.rate_bps or assumed_rate_bps
        return math.ceil(rate / 8 * (self.delay_s + self.jitter_s) / MTU_FRAME_BYTES)

    def queue_limit_packets(self):
        """The bottleneck queue the spec asked for, or its queue's default, or 1000 packets (Linux's txqueuelen)."""
        if self.queue_packets is not None:
            return self.queue_packets
        if self.queue is not None:
            return self.queue.limit_packets() or 1000
        return 1000

    def netem_limit_packets(self):
        """netem's limit: the packets in the delay line plus the queue, so netem never drops on its own."""
        return self.in_flight_packets() + self.queue_limit_packets()

    def describe(self):
        """Short text: '100 Mbit/s, 10 ms, 1% loss'."""
        parts = [format_rate(self.rate_bps) if self.rate_bps else "no rate limit"]
        if self.delay_s:
            jitter = ""
            if self.jitter_s:
                jitter = f" ± {format_time(self.jitter_s)}" + _correlated(self.jitter_correlation)
                if self.distribution != "uniform":
                    jitter += f" {self.distribution}"
            parts.append(format_time(self.delay_s) + jitter)
        if self.loss_model:
            parts.append(self.loss_model.describe())
        if self.slot:
            parts.append(self.slot.describe())
        for name in ("loss", "reorder", "duplicate", "corrupt"):
            value = getattr(self, name)
            if value and not (name == "loss" and self.loss_model):
                parts.append(f"{value * 100:.3g}% {name}" + _correlated(getattr(self, f"{name}_correlation")))
        if self.gap:
            parts.append(f"gap {self.gap}")
        if self.queue is not None:
            parts.append(self.queue.describe())
        elif self.queue_packets is not None:
            parts.append(f"queue {self.queue_packets} pkts")
        if self.police_bps:
            parts.append(f"policed at {format_rate(self.police_bps)} (burst {format_size(self.police_burst_bytes)})")
        if self.ports:
            parts.append(f"TCP port{'s' if len(self.ports) > 1 else ''} {', '.join(map(str, self.ports))} only")
        return ", ".join(parts)


@dataclass(frozen=True)
class GilbertElliott:
    """netem's Gilbert-Elliott loss model, tc's `loss gemodel P R 1-H 1-K`: losses come in bursts.

    Per packet the path moves from its good state to its bad one with probability p and back
    with r (so bursts last 1/r packets on average); it loses bad_loss of the packets in the bad
    state and good_loss in the good one. Pass it as Link(loss=GilbertElliott(...)): the link's
    mean loss (what the model uses) is (p * bad_loss + r * good_loss) / (p + r).
    """

    p: float
    r: float
    bad_loss: float = 1.0
    good_loss: float = 0.0

    def __post_init__(self):
        for name in ("p", "r", "bad_loss", "good_loss"):
            object.__setattr__(self, name, _check_probability(f"loss.{name}", getattr(self, name)))
        if not self.r > 0:
            raise ValueError("loss.r: must be > 0 (the bad state must end), got 0")

    @property
    def mean_loss(self):
        """The share of packets lost in the long run."""
        return (self.p * self.bad_loss + self.r * self.good_loss) / (self.p + self.r)

    def describe(self):
        return (
            f"Gilbert-Elliott loss (p {self.p:.3g}, r {self.r:.3g}, bad {self.bad_loss:.3g}, good {self.good_loss:.3g}; "
            f"mean {self.mean_loss * 100:.3g}%)"
        )


@dataclass(frozen=True)
class Slot:
    """netem's slot, tc's `slot MIN MAX [packets N] [bytes B]`: packets leave in bursts, as on Wi-Fi or cellular.

    netem holds packets and releases them at slot boundaries spaced between min_delay and
    max_delay apart (uniformly), at most `packets` packets and `bytes` bytes per slot (None: no limit).
    """

    min_delay: float
    max_delay: "float | None" = None
    packets: "int | None" = None
    bytes: "int | None" = None

    def __post_init__(self):
        low = _check_nonnegative_time("slot.min_delay", self.min_delay)
        high = low if self.max_delay is None else _check_nonnegative_time("slot.max_delay", self.max_delay)
        if not 0 < low <= high:
            raise ValueError(f"slot: need 0 < min_delay <= max_delay, got {self.min_delay!r}, {self.max_delay!r}")
        object.__setattr__(self, "min_delay", low)
        object.__setattr__(self, "max_delay", high)
        for name in ("packets", "bytes"):
            value = getattr(self, name)
            if value is not None:
                check_integer(f"slot.{name}", value, 1, 2**31 - 1, must="a whole number >= 1 (or None: no limit)")

    def describe(self):
        limits = [f"{self.packets} packets" for _ in [0] if self.packets] + [
            f"{self.bytes} B" for _ in [0] if self.bytes
        ]
        return f"slots every {format_time(self.min_delay)}-{format_time(self.max_delay)}" + (
            f" of at most {' and '.join(limits)}" if limits else ""
        )


def _correlated(correlation):
    return f" (correlation {correlation * 100:.3g}%)" if correlation else ""


_DIRECTION_KEYS = (
    "rate",
    "delay",
    "jitter",
    "loss",
    "reorder",
    "duplicate",
    "corrupt",
    "limit",
    "jitter_correlation",
    "loss_correlation",
    "reorder_correlation",
    "duplicate_correlation",
    "corrupt_correlation",
    "gap",
    "distribution",
    "slot",
    "queue",
    "ecn",
    "queue_options",
    "police",
    "burst",
)
_CORRELATED = (
    ("jitter_correlation", "jitter_s", "jitter"),
    ("loss_correlation", "loss", "loss"),
    ("reorder_correlation", "reorder", "reorder"),
    ("duplicate_correlation", "duplicate", "duplicate"),
    ("corrupt_correlation", "corrupt", "corrupt"),
)
#: netem's delay distributions: "uniform" is its own (no table); the others are the tables iproute2 ships.
DISTRIBUTIONS = ("uniform", "normal", "pareto", "paretonormal")
#: Where iproute2 installs its tables (tc looks in its own lib directory; distributions put it in one of these).
DISTRIBUTION_DIRS = ("/usr/lib/x86_64-linux-gnu/tc", "/usr/lib64/tc", "/usr/lib/tc", "/usr/local/lib/tc")


def distribution_table(name):
    """The path of iproute2's table for a netem delay distribution (None for "uniform"); ValueError if not shipped."""
    if name == "uniform":
        return None
    import os

    for directory in DISTRIBUTION_DIRS:
        path = os.path.join(directory, f"{name}.dist")
        if os.path.isfile(path):
            return path
    raise ValueError(
        f"distribution: no table for {name!r} in {', '.join(DISTRIBUTION_DIRS)} (iproute2 ships them: install iproute2)"
    )


def _check_nonnegative_time(field, value):
    seconds = parse_time(value, field)
    if seconds < 0:
        raise ValueError(f"{field}: must be >= 0, got {value!r}")
    if seconds > 3600:
        raise ValueError(f"{field}: must be at most 1 hour, got {value!r}")
    return seconds


def _check_probability(field, value):
    fraction = parse_fraction(value, field)
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"{field}: must be a fraction in 0..1 (or a percentage '0%'..'100%'), got {value!r}")
    return fraction


def _check_rate(field, value):
    rate = parse_rate(value, field)
    if rate <= 0:
        raise ValueError(f"{field}: must be > 0 bit/s (omit it for an unlimited link), got {value!r}")
    if rate > 400e9:
        raise ValueError(f"{field}: at most 400 Gbit/s can be shaped, got {value!r}")
    return rate


def _check_limit(field, value):
    # An int is packets (tc's netem/pfifo unit); a size string ("64kb") is bytes, rounded up to packets.
    if isinstance(value, str):
        nbytes = parse_size(value, field)
        if not 0 < nbytes <= _MAX_QUEUE_PACKETS * MTU_FRAME_BYTES:  # NaN and infinity included ('1E310')
            raise ValueError(f"{field}: must be > 0 and at most {_MAX_QUEUE_PACKETS} packets' worth, got {value!r}")
        return max(1, math.ceil(nbytes / MTU_FRAME_BYTES))
    if not is_integer(value):
        refuse(field, "a packet count (int) or a size string like '64kb'", value, TypeError)
    if not 1 <= value <= _MAX_QUEUE_PACKETS:
        raise ValueError(f"{field}: must be >= 1 packet (at most {_MAX_QUEUE_PACKETS}), got {value!r}")
    return value


#: tc's queue limits are 32-bit; netem's also holds the delay line, so half of that is left for the queue.
_MAX_QUEUE_PACKETS = 2**31 - 1


def _check_burst(where, police, burst):
    """The policer's bucket in bytes: given, or 50 ms of the police rate (at least 10 full frames).

    A bucket much under a flow's BDP costs TCP its rate (docs/queues.md, "police=, burst="); 50 ms
    serves paths up to a few tens of ms, as policers on access links are sized.
    """
    if burst is None:
        if police is None:
            return None
        return max(10 * MTU_FRAME_BYTES, math.ceil(parse_rate(police, f"{where}police") / 8 * 0.05))
    if police is None:
        raise ValueError(f"{where}burst: belongs to a policer; set police= (its rate)")
    nbytes = parse_size(burst, f"{where}burst")
    if not MTU_FRAME_BYTES <= nbytes < 2**31:
        raise ValueError(
            f"{where}burst: must hold at least one full frame ({MTU_FRAME_BYTES} B) and be under 2 GiB, got {burst!r}"
        )
    return int(nbytes)


def _check_gap(field, value):
    check_integer(
        field, value, 1, 2**32 - 1, must="a whole number of packets >= 1 (every gap-th packet skips the delay)"
    )
    return value


def _check_distribution(field, value):
    if value not in DISTRIBUTIONS:
        raise ValueError(f"{field}: must be one of {', '.join(DISTRIBUTIONS)}, got {value!r}")
    distribution_table(value)
    return value


def _one_way(
    where,
    rate,
    delay,
    jitter,
    loss,
    reorder,
    duplicate,
    corrupt,
    limit,
    jitter_correlation=None,
    loss_correlation=None,
    reorder_correlation=None,
    duplicate_correlation=None,
    corrupt_correlation=None,
    gap=None,
    distribution=None,
    slot=None,
    queue=None,
    ecn=None,
    queue_options=None,
    police=None,
    burst=None,
):
    """Validate one direction's fields and build its OneWay."""
    loss_model = None
    queue_spec = check_queue(where, queue, limit if queue is not None else None, ecn, queue_options)
    if queue_spec is not None:
        limit = None if queue_spec.limit is None else queue_spec.limit_packets()
    if isinstance(loss, GilbertElliott):
        loss_model, loss = loss, loss.mean_loss
        if loss_correlation is not None:
            raise ValueError(
                f"{where}loss_correlation: correlates independent losses; a Gilbert-Elliott model "
                "makes its own bursts (its r sets their length)"
            )
    if slot is not None and not isinstance(slot, Slot):
        raise TypeError(f"{where}slot: expected a Slot(min_delay, max_delay, packets=, bytes=), got {slot!r}")
    if gap is not None and reorder is None:
        reorder = 1.0  # tc's `gap 5 delay 10ms` is `reorder 100% gap 5`: every 5th packet skips the delay
    correlations = {
        name: 0.0 if value is None else _check_probability(f"{where}{name}", value)
        for name, value in (
            ("jitter_correlation", jitter_correlation),
            ("loss_correlation", loss_correlation),
            ("reorder_correlation", reorder_correlation),
            ("duplicate_correlation", duplicate_correlation),
            ("corrupt_correlation", corrupt_correlation),
        )
    }
    way = OneWay(
        rate_bps=None if rate is None else _check_rate(f"{where}rate", rate),
        delay_s=0.0 if delay is None else _check_nonnegative_time(f"{where}delay", delay),
        jitter_s=0.0 if jitter is None else _check_nonnegative_time(f"{where}jitter", jitter),
        loss=0.0 if loss is None else _check_probability(f"{where}loss", loss),
        reorder=0.0 if reorder is None else _check_probability(f"{where}reorder", reorder),
        duplicate=0.0 if duplicate is None else _check_probability(f"{where}duplicate", duplicate),
        corrupt=0.0 if corrupt is None else _check_probability(f"{where}corrupt", corrupt),
        queue_packets=None if limit is None else _check_limit(f"{where}limit", limit),
        gap=None if gap is None else _check_gap(f"{where}gap", gap),
        distribution="uniform" if distribution is None else _check_distribution(f"{where}distribution", distribution),
        loss_model=loss_model,
        slot=slot,
        queue=queue_spec,
        police_bps=None if police is None else _check_rate(f"{where}police", police),
        police_burst_bytes=_check_burst(where, police, burst),
        **correlations,
    )
    if queue_spec is not None and way.rate_bps is None:
        raise ValueError(
            f"{where}queue: a queue forms only behind a rate (the router forwards at once otherwise); set rate="
        )
    if queue_spec is not None and queue_spec.kind == "red" and queue_spec.option("bandwidth") is None:
        options = dict(queue_spec.options, bandwidth=way.rate_bps)
        way = dataclasses.replace(way, queue=dataclasses.replace(queue_spec, options=tuple(sorted(options.items()))))
    for name, base, base_field in _CORRELATED:
        if getattr(way, name) and not getattr(way, base):
            raise ValueError(
                f"{where}{name}: needs {base_field} (it correlates successive {base_field} draws); set {base_field}="
            )
    if way.distribution != "uniform" and not way.jitter_s:
        raise ValueError(
            f"{where}distribution: needs jitter (the table shapes how the delay varies around it); set jitter="
        )
    if way.gap and not way.delay_s:
        raise ValueError(
            f"{where}gap: needs a delay (every gap-th packet skips it; the others wait); set rtt= or delay="
        )
    if way.jitter_s and not way.delay_s:
        raise ValueError(f"{where}jitter: needs a delay (netem varies the delay around it); set rtt= or delay=")
    if way.reorder and not way.delay_s:
        raise ValueError(
            f"{where}reorder: needs a delay (netem reorders by letting some packets skip it); set rtt= or delay="
        )
    if way.jitter_s > way.delay_s:
        raise ValueError(
            f"{where}jitter: must not exceed the one-way delay "
            f"({format_time(way.jitter_s)} > {format_time(way.delay_s)}), or delays would go negative"
        )
    return way


def _warn_distorting_correlations(where, way):
    """Warn where netem's correlated draw makes an event fire at a rate far from the one asked (model/netem.py)."""
    for name, base, base_field in _CORRELATED:
        asked, correlation = getattr(way, base), getattr(way, name)
        if base_field == "jitter":
            if asked and correlation:
                warnings.warn(
                    NetemCorrelationWarning(
                        f"{where}jitter {format_time(asked)} with {name} {correlation * 100:.3g}%: netem ignores it "
                        "(it takes the correlated draw modulo the jitter's span, or the distribution table's size), "
                        "so each delay is drawn independently over the full spread (docs/design.md, pitfall 13); "
                        "a delay that drifts slowly is a Schedule of delays"
                    ),
                    stacklevel=3,
                )
            continue
        if not correlation_distorts(asked, correlation):
            continue
        applied = effective_rate(asked, correlation)
        advice = ""
        if base_field == "loss" and asked < 1:
            burst = 4  # packets per burst: r = 1/4; p from the mean p / (p + r) = asked
            advice = (
                f"; for bursty loss with a {asked * 100:.3g}% mean, loss=GilbertElliott(p={asked * 0.25 / (1 - asked):.3g}, "
                f"r=0.25) loses bursts of {burst} packets on average"
            )
        warnings.warn(
            NetemCorrelationWarning(
                f"{where}{base_field} {asked * 100:.3g}% with {name} {correlation * 100:.3g}%: netem's correlated draw "
                f"(an average of successive draws, never below its correlation times the last) fires at "
                f"{applied * 100:.3g}%, not {asked * 100:.3g}% (docs/design.md, pitfall 13); the model and the checks of "
                f"what the link applied take {applied * 100:.3g}%{advice}"
            ),
            stacklevel=3,
        )


class Link:
    """The path between client and server, shaped on the router; keyword-only, validated at once.

    ``rtt`` is split evenly between the two directions; ``delay`` is one-way and applies to
    both. ``to_client`` / ``to_server`` are dicts overriding fields for one direction
    (keys: rate, delay, jitter, loss, reorder, duplicate, corrupt, limit and netem's knobs
    below). ``limit`` is the bottleneck queue: packets (int) or bytes ("64kb").

    netem's knobs, each the tc word it stands for (README, `Link(...)`): ``jitter_correlation``,
    ``loss_correlation``, ``reorder_correlation``, ``duplicate_correlation``,
    ``corrupt_correlation`` (0..1 or "30%", each needing its base field), ``gap`` (every
    gap-th packet skips the delay; reorder defaults to 100%, as tc's ``reorder 100% gap N``)
    and ``distribution`` ("uniform", netem's own, or the tables iproute2 ships: "normal",
    "pareto", "paretonormal"; needs jitter). ``loss`` may be a GilbertElliott model (bursty
    loss), and ``slot`` a Slot (bursty delivery). ``ports``: TCP ports (a list of 1..65535)
    whose traffic alone, to or from them, the link impairs; everything else passes unimpaired
    (tc's u32 `match ip sport/dport`, on the router's egress).

    The bottleneck's queue (docs/queues.md): ``queue`` (pfifo, bfifo, fq_codel, codel, cake,
    pie, fq_pie, red, fq; needs a rate, goes to the directions that have one, after netem's
    delay line), ``ecn`` (mark instead of drop; None: the kind's default), ``queue_options``
    (the kind's own options, validated per kind). ``police``/``burst``: a token-bucket policer.
    """

    __slots__ = ("_kwargs", "toward_client", "toward_server")
    toward_client: OneWay
    toward_server: OneWay

    def __init__(
        self,
        *,
        rate=None,
        rtt=None,
        delay=None,
        jitter=None,
        loss=None,
        reorder=None,
        duplicate=None,
        corrupt=None,
        limit=None,
        jitter_correlation=None,
        loss_correlation=None,
        reorder_correlation=None,
        duplicate_correlation=None,
        corrupt_correlation=None,
        gap=None,
        distribution=None,
        slot=None,
        ports=None,
        queue=None,
        ecn=None,
        queue_options=None,
        police=None,
        burst=None,
        to_client=None,
        to_server=None,
    ):
        given = {name: value for name, value in locals().items() if name not in ("self", "__class__")}
        if _has_schedule(given):
            self._init_changing(given)
            return
        if rtt is not None and delay is not None:
            raise ValueError("rtt/delay: give either rtt (split evenly per direction) or delay (one-way), not both")
        one_way_delay = None
        if rtt is not None:
            one_way_delay = _check_nonnegative_time("rtt", rtt) / 2
        elif delay is not None:
            one_way_delay = _check_nonnegative_time("delay", delay)
        common = dict(
            rate=rate,
            delay=one_way_delay,
            jitter=jitter,
            loss=loss,
            reorder=reorder,
            duplicate=duplicate,
            corrupt=corrupt,
            limit=limit,
            jitter_correlation=jitter_correlation,
            loss_correlation=loss_correlation,
            reorder_correlation=reorder_correlation,
            duplicate_correlation=duplicate_correlation,
            corrupt_correlation=corrupt_correlation,
            gap=gap,
            distribution=distribution,
            slot=slot,
            queue=queue,
            ecn=ecn,
            queue_options=queue_options,
            police=police,
            burst=burst,
        )
        ports = _check_ports(ports)
        kwargs = {
            k: v
            for k, v in dict(
                common, rtt=rtt, delay=delay, ports=ports, to_client=to_client, to_server=to_server
            ).items()
            if v is not None
        }
        if rtt is not None:
            kwargs.pop("delay", None)
        object.__setattr__(self, "_kwargs", kwargs)
        # The prefix makes a message say which direction was wrong when an override is involved.
        merged = self._directions(common, to_client, to_server)
        client_where, server_where = "to_client." if to_client else "", "to_server." if to_server else ""
        toward_client = _one_way(client_where, **merged["to_client"])
        toward_server = _one_way(server_where, **merged["to_server"])
        # A symmetric link warns once: both of its ways would say the same thing.
        for where, way in dict.fromkeys([(client_where, toward_client), (server_where, toward_server)]):
            _warn_distorting_correlations(where, way)
        if ports is not None:
            if toward_client.is_unimpaired and toward_server.is_unimpaired:
                raise ValueError("ports: the link impairs nothing (no rate, delay, loss, ...) for the ports to scope")
            toward_client, toward_server = (
                way if way.is_unimpaired else dataclasses.replace(way, ports=ports)
                for way in (toward_client, toward_server)
            )
        object.__setattr__(self, "toward_client", toward_client)
        object.__setattr__(self, "toward_server", toward_server)

    def _init_changing(self, given):
        """A Link whose fields hold Schedules: one plain Link per step time; each direction starts as the first and
        carries the later ones as its changes."""
        steps = set()
        for name, value in _fields_of(given):
            if isinstance(value, Schedule):
                if name.rsplit(".", 1)[-1] not in SCHEDULABLE_FIELDS:
                    raise ValueError(
                        f"{name}: cannot change while a flow runs (netem and htb change "
                        f"{', '.join(SCHEDULABLE_FIELDS)} in place); give it one value"
                    )
                steps.update(value.times)
        phases = []
        for at in sorted(steps):
            try:
                phases.append((at, Link(**_values_at(given, at))))
            except (TypeError, ValueError) as exc:
                raise type(exc)(f"{exc} (in the schedule's step at {format_time(at)})") from None
        self._take_phases(phases)
        object.__setattr__(self, "_kwargs", {k: v for k, v in given.items() if v is not None})

    def _take_phases(self, phases):
        """Become the first of [(t, plain Link)], each direction carrying the later ones where it changes."""
        start = phases[0][1]
        for direction in ("toward_client", "toward_server"):
            changes, before = [], getattr(start, direction)
            for at, link in phases[1:]:
                way = getattr(link, direction)
                if way != before:
                    changes.append((at, way))
                before = way
            object.__setattr__(self, direction, dataclasses.replace(getattr(start, direction), changes=tuple(changes)))

    @classmethod
    def _of_ways(cls, toward_client, toward_server, kwargs):
        """A Link holding these two OneWays as they are (kwargs: what repr shows)."""
        link = object.__new__(cls)
        object.__setattr__(link, "toward_client", toward_client)
        object.__setattr__(link, "toward_server", toward_server)
        object.__setattr__(link, "_kwargs", kwargs)
        return link

    @property
    def changing(self):
        """True when a field holds a Schedule."""
        return bool(self.toward_client.changes or self.toward_server.changes)

    def at(self, t):
        """The plain Link in force t seconds after the start (the link itself when it never changes)."""
        if not self.changing:
            return self
        return Link._of_ways(
            _way_at(self.toward_client, t), _way_at(self.toward_server, t), {"at": t, "of": self._kwargs}
        )

    @property
    def change_times(self):
        """The times (s) at which either direction changes."""
        return sorted({at for way in (self.toward_client, self.toward_server) for at, _ in way.changes})

    @staticmethod
    def _merge(name, common, override):
        if override is None:
            return common
        if not isinstance(override, dict):
            raise TypeError(f"{name}: expected a dict of per-direction fields {_DIRECTION_KEYS}, got {override!r}")
        unknown = set(override) - set(_DIRECTION_KEYS)
        if unknown:
            raise ValueError(
                f"{name}: unknown field(s) {sorted(unknown)}; allowed: {', '.join(_DIRECTION_KEYS)} "
                "(delay is one-way here)"
            )
        merged = dict(common)
        merged.update(override)
        return merged

    @classmethod
    def _directions(cls, common, to_client, to_server):
        """Each direction's merged fields; a queue given for the whole link goes to the directions with a rate."""
        merged = {
            name: cls._merge(name, common, override)
            for name, override in (("to_client", to_client), ("to_server", to_server))
        }
        if common.get("queue") is not None:
            if all(fields.get("rate") is None for fields in merged.values()):
                raise ValueError(
                    "queue: a queue forms only behind a rate (the router forwards at once otherwise); set rate="
                )
            for name, override in (("to_client", to_client), ("to_server", to_server)):
                if merged[name].get("rate") is None and "queue" not in (override or {}):
                    merged[name].update(queue=None, ecn=None, queue_options=None)
        return merged

    def __setattr__(self, name, value):
        raise AttributeError("Link is immutable; build a new one (or use .replace(...))")

    def replace(self, **changes):
        """A new Link with some constructor arguments changed."""
        kwargs = dict(self._kwargs)
        if "rtt" in changes:
            kwargs.pop("delay", None)
        if "delay" in changes:
            kwargs.pop("rtt", None)
        kwargs.update(changes)
        return Link(**kwargs)

    @property
    def rtt_s(self):
        """The base round-trip time the router adds (both one-way delays)."""
        return self.toward_client.delay_s + self.toward_server.delay_s

    @property
    def rate_bps(self):
        """The data-direction bottleneck for a download (toward the client); None if unlimited."""
        return self.toward_client.rate_bps

    @property
    def needs_netem(self):
        """True when either direction needs the netem qdisc."""
        return self.toward_client.needs_netem or self.toward_server.needs_netem

    @property
    def ports(self):
        """The TCP ports the link impairs alone (None: all traffic)."""
        return self._kwargs.get("ports")

    def seen_by(self, *ports):
        """The link as a connection between these ports meets it: itself, or an unimpaired Link() when the
        link impairs other ports only."""
        if self.ports and not set(ports) & set(self.ports):
            return Link()
        return self

    def __eq__(self, other):
        return isinstance(other, Link) and (self.toward_client, self.toward_server) == (
            other.toward_client,
            other.toward_server,
        )

    def __hash__(self):
        return hash((self.toward_client, self.toward_server))

    def __repr__(self):
        return "Link(" + ", ".join(f"{k}={v!r}" for k, v in self._kwargs.items()) + ")"

    @classmethod
    def in_series(cls, *links):
        """The Link a flow crossing these links one after the other sees, end to end (per direction).

        The slowest rate and its queue, the delays and jitters summed, independent losses (and
        reorder, duplicate, corrupt draws) combined as 1 - prod(1 - p). netem's finer knobs
        (correlations, gap, distribution, loss model, slot) are kept where exactly one link has them
        and refused where several do: no single netem reproduces two correlated processes.
        """
        if not links or not all(isinstance(link, cls) for link in links):
            raise TypeError(f"links: expected one or more Link(...), got {links!r}")
        if len(links) == 1:
            return links[0]
        if any(link.changing for link in links):
            # One plain series link per time any of them changes.
            times = sorted({0.0, *(at for link in links for at in link.change_times)})
            series = cls.__new__(cls)
            series._take_phases([(at, cls.in_series(*(link.at(at) for link in links))) for at in times])
            object.__setattr__(series, "_kwargs", {"in_series": [link._kwargs for link in links]})
            return series
        if any(link.ports for link in links):
            raise ValueError(
                "ports: a link scoped to TCP ports cannot be one of several on a path (the model would "
                "need the flow's ports); scope the bottleneck or the access link, not both in series"
            )
        return cls(
            to_client=_way_in_series([link.toward_client for link in links]),
            to_server=_way_in_series([link.toward_server for link in links]),
        )

    def describe(self):
        """One line per direction, as a failure report shows it (a changing link: as it starts, then its changes)."""
        if self.changing:
            plain = Link._of_ways(self.toward_client.phases[0][1], self.toward_server.phases[0][1], {})
            return (
                plain.describe()
                + "; then "
                + "; ".join(f"at {format_time(at)}: {self.at(at).describe()}" for at in self.change_times)
            )
        if self.toward_client == self.toward_server:
            return f"both ways: {self.toward_client.describe()} (RTT {format_time(self.rtt_s)})"
        return (
            f"to client: {self.toward_client.describe()}; to server: {self.toward_server.describe()} "
            f"(RTT {format_time(self.rtt_s)})"
        )


def _fields_of(given):
    """(name, value) of a Link's arguments, the per-direction dicts' entries named 'to_client.rate' etc."""
    for name, value in given.items():
        if name in ("to_client", "to_server") and isinstance(value, dict):
            yield from ((f"{name}.{key}", inner) for key, inner in value.items())
        else:
            yield name, value


def _has_schedule(given):
    return any(isinstance(value, Schedule) for _, value in _fields_of(given))


def _values_at(given, at):
    """A Link's arguments with each Schedule replaced by its value at time `at`."""

    def value(v):
        return v.value_at(at) if isinstance(v, Schedule) else v

    return {
        name: ({k: value(v) for k, v in given_value.items()} if isinstance(given_value, dict) else value(given_value))
        for name, given_value in given.items()
        if given_value is not None
    }


def _way_at(way, t):
    """The OneWay in force t seconds in."""
    current = way.phases[0][1]
    for at, changed in way.changes:
        if at <= t:
            current = changed
    return current


_SERIES_ONLY_ONE = (
    "jitter_correlation",
    "loss_correlation",
    "reorder_correlation",
    "duplicate_correlation",
    "corrupt_correlation",
    "gap",
    "loss_model",
    "slot",
)


def _check_ports(ports):
    """A sorted tuple of distinct TCP ports, or None; ValueError naming the field otherwise."""
    if ports is None:
        return None
    if isinstance(ports, (int, str)) or not hasattr(ports, "__iter__"):
        raise TypeError(f"ports: expected a list of TCP ports, got {ports!r}")
    ports = list(ports)
    if not ports:
        raise ValueError("ports: an empty list would impair nothing; leave ports out to impair all traffic")
    for port in ports:
        check_integer("ports", port, 1, 65535, must="TCP ports in 1..65535 (each)")
    if len(ports) > 64:
        raise ValueError(f"ports: at most 64 (each takes two u32 filters on the router), got {len(ports)}")
    return tuple(sorted(set(ports)))


def _way_in_series(ways):
    """Per-direction constructor fields of several OneWays crossed in order (see Link.in_series)."""
    rated = [w for w in ways if w.rate_bps is not None]
    bottleneck = min(rated, key=lambda w: w.rate_bps) if rated else None
    fields = {"delay": sum(w.delay_s for w in ways)}
    if bottleneck is not None:
        fields["rate"] = bottleneck.rate_bps
    queued = bottleneck if bottleneck is not None else next((w for w in ways if w.queue_packets is not None), None)
    if queued is not None and queued.queue_packets is not None:
        fields["limit"] = queued.queue_packets
    if any(w.jitter_s for w in ways):
        fields["jitter"] = sum(w.jitter_s for w in ways)
    for name in ("loss", "reorder", "duplicate", "corrupt"):
        kept = math.prod(1 - getattr(w, name) for w in ways)
        if kept < 1:
            fields[name] = 1 - kept
    for name in _SERIES_ONLY_ONE + ("distribution",):
        having = [w for w in ways if getattr(w, name) not in (None, 0, 0.0, "uniform")]
        if len(having) > 1:
            raise ValueError(f"{name}: set on {len(having)} links of one path; a path can carry it on one link only")
        if having:
            value = getattr(having[0], name)
            fields["loss" if name == "loss_model" else name] = value
    if any(w.loss_model for w in ways):
        if sum(1 for w in ways if w.loss) > 1:
            raise ValueError(
                "loss: a Gilbert-Elliott model and another link's loss on one path; put the loss on one link only"
            )
    if fields.get("gap") and "reorder" not in fields:
        fields["reorder"] = 1.0
    return fields


def _normalize_sysctl_value(name, value):
    if isinstance(value, bool):
        raise TypeError(f"sysctls[{name!r}]: expected a string, int or tuple of ints, got {value!r}")
    if isinstance(value, (list, tuple)):
        if not value or not all(is_integer(v) for v in value):
            raise TypeError(f"sysctls[{name!r}]: a sequence must hold ints, got {value!r}")
        return " ".join(str(v) for v in value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and _CONTROL_CHARACTERS.search(value):
        raise ValueError(
            f"sysctls[{name!r}]: newlines, NUL and other control characters are refused "
            f"(one value per sysctl), got {value!r}"
        )
    if isinstance(value, str) and len(value) > _MAX_SYSCTL_TEXT:
        raise ValueError(f"sysctls[{name!r}]: at most {_MAX_SYSCTL_TEXT} characters, got {len(value)}")
    if isinstance(value, str) and value.strip():
        return " ".join(value.split())
    raise TypeError(f"sysctls[{name!r}]: expected a non-empty string, an int or a tuple of ints, got {value!r}")


def _check_triple(name, text):
    try:
        triple = [int(v) for v in text.split()]
    except ValueError:
        triple = []
    if len(triple) != 3:
        raise ValueError(f"sysctls[{name!r}]: expected three integers 'min default max', got {text!r}")
    low, default, high = triple
    if low <= 0:
        raise ValueError(f"sysctls[{name!r}]: min must be > 0 bytes, got {low}")
    if not low <= default <= high:
        raise ValueError(f"sysctls[{name!r}]: need min <= default <= max, got {text!r}")


def check_congestion_control(field, name):
    """Reject a congestion control Linux never had (a typo), naming the known ones."""
    if not isinstance(name, str) or name not in KNOWN_CONGESTION_CONTROLS:
        raise ValueError(
            f"{field}: unknown congestion control {name!r}; known: {', '.join(sorted(KNOWN_CONGESTION_CONTROLS))}"
        )
    return name


@dataclass(frozen=True)
class Host:
    """An endpoint: per-namespace sysctls and a default congestion control."""

    sysctls: "dict | None" = None
    cc: "str | None" = None

    def __post_init__(self):
        raw = self.sysctls or {}
        if not isinstance(raw, dict):
            raise TypeError(f"sysctls: expected a dict of 'net.*' names to values, got {raw!r}")
        clean = {}
        for name, value in raw.items():
            if not isinstance(name, str) or len(name) > 200 or not _SYSCTL_NAME.fullmatch(name):
                raise ValueError(
                    f"sysctls: {name!r} is not a network sysctl name; expected dotted 'net.…' "
                    "(e.g. 'net.ipv4.tcp_rmem'); other sysctls are host-wide and not per namespace"
                )
            if name in HOST_GLOBAL_SYSCTLS:
                raise ValueError(
                    f"sysctls: {name} is host-global (a network namespace cannot set it); "
                    "pytest-tcpnet never changes the host's sysctls. For socket buffers, set "
                    "net.ipv4.tcp_rmem/tcp_wmem per host or SO_RCVBUF/SO_SNDBUF on the transfer"
                )
            text = _normalize_sysctl_value(name, value)
            if name in _TRIPLE_SYSCTLS:
                _check_triple(name, text)
            if name == _CC_SYSCTL:
                check_congestion_control(f"sysctls[{name!r}]", text)
            clean[name] = text
        if self.cc is not None:
            check_congestion_control("cc", self.cc)
            if _CC_SYSCTL in clean and clean[_CC_SYSCTL] != self.cc:
                raise ValueError(f"cc: {self.cc!r} conflicts with sysctls[{_CC_SYSCTL!r}] = {clean[_CC_SYSCTL]!r}")
            clean[_CC_SYSCTL] = self.cc
        object.__setattr__(self, "sysctls", clean)
        object.__setattr__(self, "cc", clean.get(_CC_SYSCTL))

    def __hash__(self):
        return hash(tuple(sorted(self.sysctls.items())))

    def describe(self):
        """'tcp_rmem=4096 4096 4096, cc=bbr' or 'defaults'."""
        if not self.sysctls:
            return "defaults"
        return ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in sorted(self.sysctls.items()))
