"""Links that change while a flow runs: a Schedule of a Link field's values, and Mahimahi traces as rate steps."""

import math
import os

from .units import format_time, parse_time

__all__ = ["Schedule", "SCHEDULABLE_FIELDS", "MAHIMAHI_PACKET_BYTES"]

#: Link fields that netem and htb can change in place on a running qdisc (never delete and re-add:
#: docs/design.md, pitfall 11). The queue kind, a policer, ports, netem's distribution, slots and loss models stay fixed.
SCHEDULABLE_FIELDS = ("rate", "rtt", "delay", "jitter", "loss", "duplicate", "corrupt", "reorder", "limit")

#: What one line of a Mahimahi trace delivers: one MTU-sized packet (mahimahi's PACKET_SIZE).
MAHIMAHI_PACKET_BYTES = 1500
_MAX_STEPS = 100_000


class Schedule:
    """The values a Link field takes in turn: ``Schedule([(0, "40mbit"), (2, "10mbit"), (4, "40mbit")])``.

    Each step is (time, value): the time in seconds (or a tc time string) since the measurement
    started, the value in the field's own units, validated by the Link as the field itself. Steps
    start at 0 and their times increase. A Link holding a Schedule starts with its first value.
    """

    __slots__ = ("steps",)

    def __init__(self, steps):
        if isinstance(steps, (str, bytes)) or not hasattr(steps, "__iter__"):
            raise TypeError(f"Schedule: expected a list of (time, value) steps, got {steps!r}")
        checked = []
        for number, step in enumerate(steps):
            if not isinstance(step, (tuple, list)) or len(step) != 2:
                raise TypeError(f"Schedule: step {number} must be a (time, value) pair, got {step!r}")
            at = parse_time(step[0], f"Schedule step {number} time")
            if not math.isfinite(at) or at < 0:
                raise ValueError(f"Schedule: step {number} time must be a finite time >= 0, got {step[0]!r}")
            if step[1] is None or isinstance(step[1], Schedule):
                raise ValueError(f"Schedule: step {number} value must be the field's value, got {step[1]!r}")
            if checked and at <= checked[-1][0]:
                raise ValueError(
                    f"Schedule: step times must increase; step {number} at {format_time(at)} comes "
                    f"after {format_time(checked[-1][0])}"
                )
            checked.append((at, step[1]))
        if not checked:
            raise ValueError("Schedule: needs at least one step, the value at t=0")
        if checked[0][0] != 0:
            raise ValueError(
                f"Schedule: the first step must be at t=0 (the value the link starts with), "
                f"got {format_time(checked[0][0])}"
            )
        if len(checked) > _MAX_STEPS:
            raise ValueError(f"Schedule: at most {_MAX_STEPS} steps, got {len(checked)}")
        self.steps = tuple(checked)

    @property
    def times(self):
        """The steps' times (s)."""
        return tuple(at for at, _ in self.steps)

    def value_at(self, t):
        """The value in force at time t (s)."""
        value = self.steps[0][1]
        for at, step_value in self.steps:
            if at > t:
                break
            value = step_value
        return value

    @classmethod
    def repeat(cls, steps, *, period, until):
        """The steps (times within one period) again every `period` seconds, up to `until` seconds."""
        pattern = cls(steps)
        period = parse_time(period, "Schedule.repeat period")
        until = parse_time(until, "Schedule.repeat until")
        if not math.isfinite(period) or period <= pattern.steps[-1][0]:
            raise ValueError(
                f"Schedule.repeat: period must be finite and after the last step "
                f"({format_time(pattern.steps[-1][0])}), got {period!r}"
            )
        if not math.isfinite(until) or until < period:
            raise ValueError(f"Schedule.repeat: until must be finite and at least one period, got {until!r}")
        if until / period * len(pattern.steps) > _MAX_STEPS:
            raise ValueError(f"Schedule.repeat: more than {_MAX_STEPS} steps up to {format_time(until)}")
        repeated, start = [], 0.0
        while start < until:
            repeated += [(start + at, value) for at, value in pattern.steps if start + at < until]
            start += period
        return cls(_merge_equal(repeated))

    @classmethod
    def from_mahimahi(cls, path, interval=0.1, *, duration=None):
        """Rate steps from a Mahimahi trace: one 1500-byte delivery opportunity per line, at that millisecond.

        Each `interval` s bin's opportunities become its rate (4 lines per ms = 48 Mbit/s); equal
        neighbours merge. The trace repeats, as mahimahi replays it, up to `duration` seconds (None:
        once). A bin without opportunities (an outage) takes the slowest rate the trace has, since
        htb cannot stop a class (said here so no one reads an outage into the result).
        """
        interval = parse_time(interval, "from_mahimahi interval")
        if not math.isfinite(interval) or not 0.001 <= interval <= 60:
            raise ValueError(f"from_mahimahi: interval must be in [1 ms, 60 s], got {interval!r}")
        stamps = _read_trace(path)
        period_ms = stamps[-1]
        if period_ms <= 0:
            raise ValueError(
                f"from_mahimahi: {os.fspath(path)}: a trace must span more than 0 ms (mahimahi's "
                "period is its last timestamp)"
            )
        period = period_ms / 1000
        duration = period if duration is None else parse_time(duration, "from_mahimahi duration")
        if not math.isfinite(duration) or duration <= 0:
            raise ValueError(f"from_mahimahi: duration must be > 0, got {duration!r}")
        bins = max(1, math.ceil(duration / interval - 1e-9))
        if bins > _MAX_STEPS:
            raise ValueError(f"from_mahimahi: {bins} bins of {format_time(interval)}; at most {_MAX_STEPS}")
        counts = [0] * bins
        repeats = math.ceil(duration / period)
        for repeat in range(repeats):
            for stamp in stamps:
                # A line at millisecond m delivers during the m-th millisecond ((m-1, m]); a timestamp of 0 opens it.
                at = repeat * period + max(stamp - 1, 0) / 1000
                if at < duration:
                    counts[min(bins - 1, int(at / interval + 1e-9))] += 1
        # The last bin may be shorter than interval.
        widths = [min(interval, duration - i * interval) for i in range(bins)]
        rates = [count * MAHIMAHI_PACKET_BYTES * 8 / width for count, width in zip(counts, widths)]
        floor = min((rate for rate in rates if rate > 0), default=None)
        if floor is None:
            raise ValueError(
                f"from_mahimahi: {os.fspath(path)}: no delivery opportunity within {format_time(duration)}"
            )
        steps = [(round(i * interval, 9), f"{round(rate or floor)}bit") for i, rate in enumerate(rates)]
        return cls(_merge_equal(steps))

    def describe(self):
        """'0 s: 40 Mbit/s, 2 s: 10 Mbit/s, ...' (values as given)."""
        shown = [f"{format_time(at)}: {value}" for at, value in self.steps[:8]]
        return ", ".join(shown) + (f", ... ({len(self.steps)} steps)" if len(self.steps) > 8 else "")

    def __eq__(self, other):
        return isinstance(other, Schedule) and self.steps == other.steps

    def __hash__(self):
        return hash(self.steps)

    def __repr__(self):
        return f"Schedule({list(self.steps)!r})"


def _merge_equal(steps):
    """Steps without those that repeat the value before them."""
    merged = []
    for at, value in steps:
        if not merged or merged[-1][1] != value:
            merged.append((at, value))
    return merged


def _read_trace(path):
    """A Mahimahi trace's millisecond timestamps; ValueError if the file is empty or not a trace."""
    where = os.fspath(path)
    try:
        with open(path) as f:
            lines = f.read().split()
    except UnicodeDecodeError:
        raise ValueError(f"from_mahimahi: {where}: not a Mahimahi trace (not text)") from None
    if not lines:
        raise ValueError(f"from_mahimahi: {where}: empty; a trace has one millisecond timestamp per line")
    stamps = []
    for number, text in enumerate(lines, start=1):
        if not text.isdigit():
            raise ValueError(
                f"from_mahimahi: {where}: line {number} is {text[:40]!r}, not a timestamp in whole "
                "milliseconds; not a Mahimahi trace"
            )
        stamp = int(text)
        if stamps and stamp < stamps[-1]:
            raise ValueError(
                f"from_mahimahi: {where}: line {number} ({stamp} ms) goes back in time "
                f"(after {stamps[-1]} ms); not a Mahimahi trace"
            )
        stamps.append(stamp)
    return stamps
