"""One JSON-able row per measured flow: the conditions it ran under and the figures it gave.

Rows are what the session summary, the JUnit properties and the results file are made of.
They read results only through attributes (with defaults), so figures that later features add
(``limited_by``, ``events``, ``artifacts``, the model's prediction) appear once they exist and
show as missing ("-") until then.
"""

import dataclasses

from .. import guest
from ..model.validation import is_number

SCHEMA = 1

#: Capture event counts copied into a row when the result has a capture (keys of CaptureResult.events).
EVENT_KEYS = (
    "window_full",
    "zero_window",
    "zero_window_probe",
    "window_update",
    "retransmission",
    "fast_retransmission",
    "spurious_retransmission",
    "duplicate_ack",
    "out_of_order",
    "lost_segment",
)


def flow_rows(results, *, test, outcome=None):
    """Rows for everything one test's lab produced, numbered in order.

    A WindowProbe stands for the transfer it ran, so that transfer is not listed twice.
    """
    probed = {id(r.transfer) for r in results if _is_probe(r)}
    rows = []
    for result in results:
        if id(result) in probed:
            continue
        row = flow_row(result, test=test, flow=len(rows), outcome=outcome)
        rows.append(row)
    return rows


def flow_row(result, *, test="", flow=0, outcome=None):
    """The row of one TransferResult (or WindowProbe): full conditions plus key figures."""
    probe = result if _is_probe(result) else None
    transfer = probe.transfer if probe else result
    buffers = (getattr(transfer, "sender", None) or {}).get("buffers", {})
    rbuffers = (getattr(transfer, "receiver", None) or {}).get("buffers", {})
    measured = _number(_attr(transfer, "throughput_bps"))
    prediction = predict(transfer)
    expected = _number(getattr(prediction, "bps", None))
    label, shares = _limited_by(transfer)
    events = _events(transfer)
    row = {
        "schema": SCHEMA,
        "test": test,
        "flow": flow,
        "outcome": outcome,
        "kind": "window_probe" if probe else "transfer",
        "kernel": getattr(transfer, "kernel", None),
        "backend": guest.backend(),
        "direction": getattr(transfer, "direction", None),
        "nbytes": getattr(transfer, "nbytes", None),
        "duration_s": _number(getattr(transfer, "duration_s", None)),
        "link": link_record(getattr(transfer, "link", None)),
        "client": host_record(getattr(transfer, "client", None)),
        "server": host_record(getattr(transfer, "server", None)),
        "sysctls": getattr(transfer, "sysctls", None) or {},
        "buffers": {
            "sndbuf_requested": getattr(transfer, "sndbuf_requested", None),
            "sndbuf": _attr(transfer, "effective_sndbuf", buffers.get("sndbuf")),
            "rcvbuf_requested": getattr(transfer, "rcvbuf_requested", None),
            "rcvbuf": _attr(transfer, "effective_rcvbuf", rbuffers.get("rcvbuf")),
        },
        "cc": _attr(transfer, "cc", buffers.get("cc")),
        "measured_bps": measured,
        "active_bps": _number(_attr(transfer, "active_throughput_bps")),
        "expected_bps": expected,
        "bound": getattr(prediction, "bound", None),
        "why": getattr(prediction, "why", None),
        "ratio": measured / expected if measured and expected else None,
        "limited_by": label,
        "limited_shares": shares,
        "events": events,
        "window_full": None if events is None else events.get("window_full"),
        "retransmissions": _attr(transfer, "retransmits"),
        "min_rtt_s": _number(_attr(transfer, "min_rtt_s")),
        "rtt_s": _number(_attr(transfer, "rtt_s")),
        "emulator_drops": _attr(transfer, "emulator_drops"),
        "advertised_window": probe.window_bytes if probe else None,
        # A changing link (Schedule): each phase's figures and each step as the kernel took it.
        "phases": [
            {
                "number": p.number,
                "scheduled_at": p.scheduled_at,
                "start_s": p.start_s,
                "end_s": p.end_s,
                "link": p.link.describe(),
                "goodput_bps": _number(p.goodput_bps),
                "rtt_s": _number(p.rtt_s),
                "retransmissions": p.retransmits,
            }
            for p in (_attr(transfer, "phases") or [])
        ],
        "link_changes": list(getattr(transfer, "link_changes", None) or []),
        "offloads": getattr(transfer, "offloads", None) or {},
        "host_contention_cpus": _number(getattr(transfer, "host_contention_cpus", None)),
        "artifacts": [str(p) for p in (_attr(transfer, "artifacts") or [])],
    }
    return row


def predict(result):
    """The model's prediction for a result, or None while the model has none (or cannot say)."""
    try:
        from ..model import expected_throughput
    except ImportError:
        return None
    try:
        return expected_throughput(result)
    except Exception:  # a flow the model does not cover is shown without a prediction, not a crash
        return None


def link_record(link):
    """A link as data: its one-line description, base RTT and each direction's fields (SI units)."""
    if link is None:
        return None
    record = {"describe": link.describe(), "rtt_s": link.rtt_s}
    for side in ("toward_client", "toward_server"):
        way = getattr(link, side, None)
        if dataclasses.is_dataclass(way):
            record[side] = dataclasses.asdict(way)
    return record


def host_record(host):
    """An endpoint as data: the sysctls and cc the test asked for (the effective ones are in 'sysctls')."""
    if host is None:
        return None
    return {"sysctls": dict(getattr(host, "sysctls", None) or {}), "cc": getattr(host, "cc", None)}


def _is_probe(result):
    return hasattr(result, "window_bytes") and hasattr(result, "transfer")


def _attr(obj, name, default=None):
    """obj.name, or default when the attribute does not exist yet or cannot be computed for this result."""
    try:
        value = getattr(obj, name)
    except Exception:  # a property that needs data this result lacks (e.g. no TCP_INFO)
        return default
    return default if value is None else value


def _number(value):
    return value if is_number(value) else None


def _limited_by(result):
    """(label, shares): the result's verdict and the shares behind it (of samples, or of the chrono counters)."""
    verdict = _attr(result, "limited_by")
    if isinstance(verdict, (tuple, list)) and verdict:  # a result type that gives (label, shares) itself
        return str(verdict[0]), verdict[1] if len(verdict) > 1 and isinstance(verdict[1], dict) else None
    if verdict is None:
        return None, None
    own = _attr(result, "limited_by_shares")
    behind = own() if callable(own) else None
    if behind and behind[0] == verdict:
        return str(verdict), behind[1]
    from ..analysis.limits import chrono_shares

    try:
        return str(verdict), chrono_shares(_attr(result, "sender_tcp_info"), _attr(result, "sender_active_s"))
    except ValueError:
        return str(verdict), None


def _events(result):
    events = _attr(result, "events")
    if events is None:
        capture = _attr(result, "capture")
        events = _attr(capture, "events") if capture is not None else None
    if events is None:
        return None
    return {key: int(events.get(key, 0) or 0) for key in EVENT_KEYS} | {
        k: v for k, v in dict(events).items() if k not in EVENT_KEYS and isinstance(v, (int, float))
    }
