"""Pure series built from decoded capture packets: time-sequence data, windows, throughput, EWMA."""

import math
from dataclasses import dataclass, field

__all__ = ["TimeSequence", "time_sequence", "capture_windows", "acked_rate_series", "ewma", "suggest_interval"]


@dataclass
class TimeSequence:
    """What a tcptrace time-sequence graph draws; times in s from the first data byte, sequence in bytes."""

    segments: list = field(default_factory=list)  # (t, seq_start, seq_end) of first transmissions
    retransmissions: list = field(default_factory=list)  # (t, seq_start, seq_end)
    acks: list = field(default_factory=list)  # (t, ack)
    window_edge: list = field(default_factory=list)  # (t, ack + advertised window): the receive-window line
    zero_windows: list = field(default_factory=list)  # (t, ack) where the receiver advertised 0
    window_full: list = field(default_factory=list)  # (t, seq_end) of segments that filled the window
    probes: list = field(default_factory=list)  # (t, seq) of zero-window probes


_RETRANSMISSION_KINDS = {"retransmission", "fast_retransmission", "spurious_retransmission"}


def _main_stream(packets):
    """Packets of the stream that carried the most payload (a capture may hold stray flows)."""
    payload = {}
    for p in packets:
        payload[p.stream] = payload.get(p.stream, 0) + p.len
    if not payload:
        return []
    stream = max(payload, key=payload.get)
    return [p for p in packets if p.stream == stream]


def _origin(packets):
    """Time of the first data byte (series share this origin with TCP_INFO series), or of the first packet."""
    first_data = next((p.time for p in packets if p.direction == "data" and p.len > 0), None)
    return first_data if first_data is not None else (packets[0].time if packets else 0.0)


def time_sequence(packets):
    """TimeSequence of the main flow of decoded packets (capture.decode.Packet records)."""
    packets = _main_stream(packets)
    origin = _origin(packets)
    ts = TimeSequence()
    for p in packets:
        t = p.time - origin
        if p.direction == "data":
            if "zero_window_probe" in p.expert:
                ts.probes.append((t, p.seq))
            if p.len == 0:
                continue
            target = ts.retransmissions if _RETRANSMISSION_KINDS & set(p.expert) else ts.segments
            target.append((t, p.seq, p.seq + p.len))
            if "window_full" in p.expert:
                ts.window_full.append((t, p.seq + p.len))
        elif "A" in p.flags:
            ts.acks.append((t, p.ack))
            ts.window_edge.append((t, p.ack + p.window))
            if "zero_window" in p.expert:
                ts.zero_windows.append((t, p.ack))
    return ts


def capture_windows(packets):
    """{"advertised window": [(t, bytes)], "bytes in flight": [(t, bytes)]} of the main flow."""
    packets = _main_stream(packets)
    origin = _origin(packets)
    advertised = [(p.time - origin, p.window) for p in packets if p.direction == "ack" and "A" in p.flags]
    in_flight = [
        (p.time - origin, p.bytes_in_flight) for p in packets if p.direction == "data" and p.bytes_in_flight is not None
    ]
    return {"advertised window": advertised, "bytes in flight": in_flight}


def acked_rate_series(packets, interval):
    """[(t_end, bit/s)]: bytes newly acknowledged in each interval, from the receiver's ACKs."""
    if not interval > 0:
        raise ValueError(f"interval: must be > 0 seconds, got {interval!r}")
    packets = _main_stream(packets)
    origin = _origin(packets)
    acks = [(p.time - origin, p.ack) for p in packets if p.direction == "ack" and "A" in p.flags]
    if not acks:
        return []
    first_seq = next((p.seq for p in packets if p.direction == "data" and p.len > 0), acks[0][1])
    series, highest, bin_end, bin_start_ack = [], first_seq, interval, first_seq
    for t, ack in acks:
        while t > bin_end:
            series.append((bin_end, (highest - bin_start_ack) * 8 / interval))
            bin_start_ack, bin_end = highest, bin_end + interval
        highest = max(highest, ack)
    series.append((bin_end, (highest - bin_start_ack) * 8 / interval))
    return series


def ewma(series, alpha=0.25):
    """Exponentially weighted moving average of [(t, value)]: what download tools show as "current speed"."""
    if not 0 < alpha <= 1:
        raise ValueError(f"alpha: must be in (0, 1], got {alpha!r}")
    out, average = [], None
    for t, value in series:
        average = value if average is None else alpha * value + (1 - alpha) * average
        out.append((t, average))
    return out


def suggest_interval(duration_s, bins=50):
    """An interval giving about `bins` points over duration_s, rounded up to 1, 2 or 5 times a power of ten."""
    if not duration_s or duration_s <= 0:
        return 0.1
    raw = duration_s / bins
    base = 10.0 ** math.floor(math.log10(raw))
    return next(step * base for step in (1, 2, 5, 10) if step * base >= raw * (1 - 1e-9))
