"""The bottleneck's queue discipline: which qdisc holds the queue, its options, ECN; validated before anything exists.

A Queue is what Link(queue=..., ecn=..., queue_options=...) becomes for one direction. The
link's ``limit`` stays the one queue-size field for every kind (packets, or bytes for bfifo).
"""

import math
from dataclasses import dataclass

from .units import MTU_FRAME_BYTES, format_rate, format_size, format_time, parse_fraction, parse_size, parse_time
from .validation import check_flag, check_integer, is_integer, refuse

__all__ = ["Queue", "QUEUE_KINDS", "ECN_QUEUES", "check_queue", "CAKE_FLOW_MODES", "CAKE_DIFFSERV_MODES"]

CAKE_FLOW_MODES = (
    "flowblind",
    "srchost",
    "dsthost",
    "hosts",
    "flows",
    "dual-srchost",
    "dual-dsthost",
    "triple-isolate",
)
CAKE_DIFFSERV_MODES = ("diffserv3", "diffserv4", "diffserv8", "besteffort", "precedence")


def _time(field, value):
    seconds = parse_time(value, field)
    if not 0 < seconds <= 60:
        raise ValueError(f"{field}: must be > 0 and at most 60 s, got {value!r}")
    return seconds


def _size(field, value):
    nbytes = parse_size(value, field)
    if not 0 < nbytes < 2**32 or nbytes != int(nbytes):
        raise ValueError(f"{field}: must be a whole number of bytes in 1..2^32-1 (or '64kb'), got {value!r}")
    return int(nbytes)


def _count(field, value, most=2**32 - 1):
    return check_integer(field, value, 1, most)


def _flag(field, value):
    check_flag(field, value, ValueError)
    return value


def _probability(field, value):
    fraction = parse_fraction(value, field)
    if not 0 < fraction <= 1:
        raise ValueError(f"{field}: must be a fraction in (0, 1] (or '2%'), got {value!r}")
    return fraction


def _choice(choices):
    def check(field, value):
        if value not in choices:
            raise ValueError(f"{field}: must be one of {', '.join(choices)}, got {value!r}")
        return value

    return check


def _alpha_beta(field, value):
    return _count(field, value, most=32)


#: Per kind: (its options -> validator, whether it can mark ECN, its ECN default in the kernel, what
#: `limit` counts, the kernel's own default limit in that unit or None when it sizes itself).
#: Options are the tc words (`tc-fq_codel(8)` etc.), in SI units after validation.
QUEUE_KINDS = {
    "pfifo": ({}, False, False, "packets", 1000),
    "bfifo": ({}, False, False, "bytes", None),
    "fq_codel": (
        {
            "target": _time,
            "interval": _time,
            "flows": _count,
            "quantum": _size,
            "ce_threshold": _time,
            "memory_limit": _size,
            "drop_batch": _count,
        },
        True,
        True,
        "packets",
        10240,
    ),
    "codel": ({"target": _time, "interval": _time, "ce_threshold": _time}, True, False, "packets", 1000),
    "pie": (
        {
            "target": _time,
            "tupdate": _time,
            "alpha": _alpha_beta,
            "beta": _alpha_beta,
            "bytemode": _flag,
            "dq_rate_estimator": _flag,
        },
        True,
        False,
        "packets",
        1000,
    ),
    "fq_pie": (
        {
            "target": _time,
            "tupdate": _time,
            "alpha": _alpha_beta,
            "beta": _alpha_beta,
            "flows": _count,
            "quantum": _size,
            "memory_limit": _size,
            "ecn_prob": _probability,
            "bytemode": _flag,
            "dq_rate_estimator": _flag,
        },
        True,
        False,
        "packets",
        10240,
    ),
    # cake marks every ECN-capable packet it would drop; the kernel has no switch to make it drop them.
    "cake": (
        {
            "rtt": _time,
            "flow_mode": _choice(CAKE_FLOW_MODES),
            "diffserv": _choice(CAKE_DIFFSERV_MODES),
            "ack_filter": _flag,
            "nat": _flag,
            "wash": _flag,
            "split_gso": _flag,
            "overhead": None,
            "mpu": None,
            "memory": _size,
        },
        True,
        True,
        None,
        None,
    ),
    "red": (
        {
            "min": _size,
            "max": _size,
            "avpkt": _size,
            "burst": _count,
            "probability": _probability,
            "bandwidth": None,
            "harddrop": _flag,
            "adaptive": _flag,
        },
        True,
        False,
        "bytes",
        None,
    ),
    # fq marks only above an explicit ce_threshold; it has no ECN switch of its own.
    "fq": (
        {
            "flow_limit": _count,
            "quantum": _size,
            "initial_quantum": _size,
            "maxrate": None,
            "buckets": _count,
            "ce_threshold": _time,
            "horizon": _time,
            "pacing": _flag,
        },
        False,
        False,
        "packets",
        10000,
    ),
}
#: The kinds that can mark instead of drop (Link(ecn=True) is refused on the others).
ECN_QUEUES = frozenset(kind for kind, (_, marks, _, _, _) in QUEUE_KINDS.items() if marks)


def _overhead(field, value):
    return check_integer(field, value, -64, 256, must="bytes added per packet, a whole number in -64..256")


def _mpu(field, value):
    return _count(field, value, most=256)


def _rate(field, value):
    from .units import parse_rate

    rate = parse_rate(value, field)
    if not 0 < rate <= 400e9:
        raise ValueError(f"{field}: must be > 0 and at most 400 Gbit/s, got {value!r}")
    return rate


_SPECIAL = {
    ("cake", "overhead"): _overhead,
    ("cake", "mpu"): _mpu,
    ("red", "bandwidth"): _rate,
    ("fq", "maxrate"): _rate,
}


_TIME_OPTIONS = frozenset({"target", "interval", "ce_threshold", "tupdate", "rtt", "horizon"})
_SIZE_OPTIONS = frozenset({"quantum", "initial_quantum", "memory_limit", "memory", "min", "max", "avpkt"})


@dataclass(frozen=True)
class Queue:
    """One direction's bottleneck queue: kind, limit (packets or bytes, per kind; None: the kind's default),
    ecn (None: the kind's default) and its other options as sorted (name, value) pairs."""

    kind: str
    limit: "int | None" = None
    ecn: "bool | None" = None
    options: tuple = ()

    @property
    def limit_unit(self):
        return QUEUE_KINDS[self.kind][3]

    @property
    def marks_ecn(self):
        """Whether the queue marks ECN-capable packets instead of dropping them (the kind's default if not asked)."""
        return QUEUE_KINDS[self.kind][2] if self.ecn is None else self.ecn

    def option(self, name, default=None):
        return dict(self.options).get(name, default)

    def limit_packets(self):
        """The queue's capacity in full-size packets (bytes / 1514 for byte-limited kinds), None if the kind sizes
        itself (cake: by memory)."""
        default = QUEUE_KINDS[self.kind][4]
        limit = self.limit if self.limit is not None else default
        if limit is None:
            return None
        return limit if self.limit_unit == "packets" else max(1, math.ceil(limit / MTU_FRAME_BYTES))

    def standing_bytes(self, rate_bps):
        """The queue an AQM lets a loss-based flow keep standing at rate_bps (None: a drop-tail queue fills).

        CoDel's and PIE's control laws hold the sojourn time near their target (fq_codel/codel 5 ms,
        pie/fq_pie 15 ms, cake rtt/20 = 5 ms by default); RED's average sits between its thresholds.
        """
        if self.kind == "red":
            return (self.option("min") + self.option("max")) / 2
        target = {"fq_codel": 0.005, "codel": 0.005, "pie": 0.015, "fq_pie": 0.015}.get(self.kind)
        if self.kind == "cake":
            target = self.option("rtt", 0.1) / 20
        target = self.option("target", target)
        return None if target is None else target * rate_bps / 8

    def describe(self):
        """'fq_codel limit 1000, ecn, target 5 ms'."""
        words = [self.kind]
        if self.limit is not None:
            words.append(f"limit {self.limit}" if self.limit_unit == "packets" else f"limit {format_size(self.limit)}")
        if self.ecn is not None:
            words.append("ecn" if self.ecn else "no ecn")
        for name, value in self.options:
            if isinstance(value, bool):
                words.append(name if value else f"no {name}")
            elif name in _TIME_OPTIONS:
                words.append(f"{name} {format_time(value)}")
            elif name in _SIZE_OPTIONS:
                words.append(f"{name} {format_size(value)}")
            elif name in ("bandwidth", "maxrate"):
                words.append(f"{name} {format_rate(value)}")
            elif name in ("probability", "ecn_prob"):
                words.append(f"{name} {value * 100:.3g}%")
            else:
                words.append(f"{name} {value}")
        return " ".join(words[:1]) + (", " + ", ".join(words[1:]) if len(words) > 1 else "")


def check_queue(where, kind, limit, ecn, options):
    """Validate Link(queue=, limit=, ecn=, queue_options=) for one direction; a Queue, or None when none is asked.

    limit: what Link's own `limit` validation accepted (packets as int, or the raw size string for
    a byte-limited kind). Raises ValueError naming the field.
    """
    if kind is None:
        if ecn is not None:
            raise ValueError(f"{where}ecn: needs a queue that can mark ({', '.join(sorted(ECN_QUEUES))}); set queue=")
        if options:
            raise ValueError(f"{where}queue_options: needs queue= (the options belong to a queue discipline)")
        return None
    if kind not in QUEUE_KINDS:
        raise ValueError(f"{where}queue: unknown queue discipline {kind!r}; known: {', '.join(QUEUE_KINDS)}")
    allowed, marks, _, unit, _ = QUEUE_KINDS[kind]
    if ecn is not None and not isinstance(ecn, bool):
        refuse(f"{where}ecn", "True or False (None: the queue's default)", ecn)
    if ecn and not marks:
        raise ValueError(
            f"{where}ecn: {kind} cannot mark ECN (it only drops); queues that can: {', '.join(sorted(ECN_QUEUES))}"
        )
    if ecn is False and kind == "cake":
        raise ValueError(
            f"{where}ecn: cake always marks ECN-capable packets (the kernel has no switch); "
            "leave ecn unset, or hosts without net.ipv4.tcp_ecn=1 send no ECN-capable packets"
        )
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise TypeError(f"{where}queue_options: expected a dict of {kind}'s options, got {options!r}")
    checked = {}
    for name, value in options.items():
        if name not in allowed:
            hint = (
                " (the link's rate shapes for every queue, so cake runs unlimited under it)"
                if (kind, name) == ("cake", "bandwidth")
                else " (set it with the link's limit=)"
                if name == "limit"
                else " (set it with the link's ecn=)"
                if name == "ecn"
                else ""
            )
            known = ", ".join(sorted(allowed)) or "none"
            raise ValueError(f"{where}queue_options: {kind} has no option {name!r}{hint}; its options: {known}")
        check = allowed[name] or _SPECIAL[(kind, name)]
        checked[name] = check(f"{where}queue_options.{name}", value)
    if limit is not None:
        if unit is None:
            raise ValueError(f"{where}limit: {kind} sizes its queue by memory; set queue_options={{'memory': ...}}")
        limit = _queue_limit(f"{where}limit", limit, unit)
    if kind == "red":
        _check_red(where, limit, checked)
    return Queue(kind, limit, ecn, tuple(sorted(checked.items())))


def _queue_limit(field, value, unit):
    """A packet count (int) for packet-limited kinds, bytes for byte-limited ones ('64kb', or packets x 1514)."""
    if not (is_integer(value) or isinstance(value, str)):
        refuse(field, "a packet count (int) or a size string like '64kb'", value, TypeError)
    if unit == "bytes":
        nbytes = value * MTU_FRAME_BYTES if isinstance(value, int) else parse_size(value, field)
        if not 0 < nbytes < 2**32:
            raise ValueError(f"{field}: must be > 0 and under 4 GiB, got {value!r}")
        return int(nbytes)
    if isinstance(value, str):
        nbytes = parse_size(value, field)
        if not 0 < nbytes < 2**32 * MTU_FRAME_BYTES:
            raise ValueError(f"{field}: must be > 0, got {value!r}")
        return max(1, math.ceil(nbytes / MTU_FRAME_BYTES))
    if not 1 <= value < 2**32:
        raise ValueError(f"{field}: must be >= 1 packet, got {value!r}")
    return value


def _check_red(where, limit, options):
    """red needs min < max <= limit (bytes), as tc-red(8) asks; fill tc's defaults for the others."""
    if limit is None:
        raise ValueError(f"{where}limit: red needs a limit (bytes, e.g. '400kb': its hard queue size)")
    high = options.get("max", limit // 4)
    low = options.get("min", high // 3)
    if not 0 < low < high <= limit:
        raise ValueError(
            f"{where}queue_options: red needs 0 < min < max <= limit, got min {low}, max {high}, limit {limit} (bytes)"
        )
    options.setdefault("max", high)
    options.setdefault("min", low)
    options.setdefault("avpkt", 1000)
    options.setdefault("probability", 0.02)
