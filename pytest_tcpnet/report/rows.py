"""One JSON-able row per registered result: the conditions it ran under and the figures it gave.

Rows are what the session summary, the JUnit properties and the results file are made of. Every
kind of result a lab registers has a row (result_row picks the builder by type): a transfer and a
window probe are judged by rate; a request/response run and a latency probe by time (measured_s
against the model's expected_s; ratio = expected_s / measured_s, so below 1 is slower than the
model, as for a rate); a UDP stream by the rate it delivered of what it offered.
Transfer rows read results through attributes (with defaults), so a figure a result lacks shows
as missing ("-").
"""

import dataclasses
import os
import statistics

from .. import guest
from ..model import format_rate, format_time
from ..model.stats import percentile as _percentile
from ..model.validation import is_number

SCHEMA = 2  # 2: results files also hold a row per test and per session (report/results_file.py)

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


def phase_outcome(report) -> str:
    """One phase's outcome in pytest's words: passed, failed, skipped, or xfailed/xpassed for an expected failure."""
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return report.outcome


def test_outcome(phases: dict) -> str:
    """A test's outcome from its phases' ({"setup": ..., "call": ..., "teardown": ...}, phase_outcome's words): an
    expected failure as pytest words it, a failed call "failed", a failed setup or teardown "error", a skip
    "skipped", else the call's."""
    for when in ("setup", "call"):
        if phases.get(when) in ("xfailed", "xpassed"):
            return phases[when]
    if phases.get("call") == "failed":
        return "failed"
    if "failed" in (phases.get("setup"), phases.get("teardown")):
        return "error"
    if "skipped" in (phases.get("setup"), phases.get("call")):
        return "skipped"
    return phases.get("call", "passed")


def test_row(nodeid: str, outcome: str, seconds: float, *, shard) -> dict:
    """A test's row in a results file: its outcome, its phases' time, the kernel and the shard it ran in."""
    return {
        "schema": SCHEMA,
        "kind": "test",
        "test": nodeid,
        "outcome": outcome,
        "duration_s": round(seconds, 6),
        "kernel": os.uname().release,
        "shard": shard,
    }


def session_row(collected, exitstatus: int, *, shard) -> dict:
    """The session's row: every test it collected (before any split), so a merge can check each ran once."""
    return {
        "schema": SCHEMA,
        "kind": "session",
        "collected": sorted(collected),
        "kernel": os.uname().release,
        "shard": shard,
        "exitstatus": int(exitstatus),
    }


def flow_rows(results, *, test, outcome=None):
    """Rows for everything one test's lab produced, numbered in order.

    A WindowProbe stands for the transfer it ran, so that transfer is not listed twice.
    """
    from ..results import transfer_of

    probed = {id(transfer) for r in results if (transfer := transfer_of(r)) is not None and transfer is not r}
    rows = []
    for result in results:
        if id(result) in probed:
            continue
        rows.append(result_row(result, test=test, flow=len(rows), outcome=outcome))
    return rows


def result_row(result, *, test="", flow=0, outcome=None):
    """The row of any registered result, by its kind (results.REGISTERED_KINDS)."""
    for kind, build in _builders():
        if isinstance(result, kind):
            return build(result, test=test, flow=flow, outcome=outcome)
    kinds = ", ".join(kind.__name__ for kind, _ in _builders())
    raise TypeError(f"no row for a {type(result).__name__}: a lab registers only {kinds}")


def _skeleton(kind, result, *, test, flow, outcome):
    """The fields every row has (None where a kind has no such figure), so readers never miss a key."""
    link = getattr(result, "link", None)
    return {
        "schema": SCHEMA,
        "test": test,
        "flow": flow,
        "outcome": outcome,
        "kind": kind,
        "kernel": getattr(result, "kernel", None),
        "backend": guest.backend(),
        "direction": None,
        "nbytes": None,
        "upload_bytes": None,
        "download_bytes": None,
        "duration_s": None,
        "lifetime_s": None,
        "link": link_record(link),
        "client": None,
        "server": None,
        "sysctls": getattr(result, "sysctls", None) or {},
        "buffers": {},
        "cc": None,
        "measured_bps": None,
        "active_bps": None,
        "expected_bps": None,
        "measured_s": None,
        "expected_s": None,
        "figure": None,
        "bound": None,
        "why": None,
        "ratio": None,
        "limited_by": None,
        "limited_shares": None,
        "events": None,
        "window_full": None,
        "retransmissions": None,
        "min_rtt_s": None,
        "rtt_s": None,
        "emulator_drops": None,
        "advertised_window": None,
        "phases": [],
        "link_changes": [],
        "offloads": {},
        "host_contention_cpus": None,
        "host_steal_cpus": None,
        "sibling_cpus": None,
        "cpus_polled": _attr(result, "cpus_polled"),
        "void_takes": void_take_records(result),
        "applied": [],
        "applied_delay": None,
        "share": None,
        "host_limit": None,
        "applied_rate": None,
        "applied_duplicate": None,
        "applied_reorder": None,
        "artifacts": [],
        "notes": "",
    }


def void_take_records(result):
    """The takes voided beside hypervisor steal before this result's (measure.run), as the results file keeps them:
    never a silent retake."""
    return [
        {"steal_cpus": take.steal_cpus, "seconds": take.seconds, "waited_s": take.waited_s}
        for take in (_attr(result, "void_takes") or ())
    ]


def _time_ratio(expected_s, measured_s):
    return expected_s / measured_s if is_number(expected_s) and is_number(measured_s) and measured_s > 0 else None


def requests_row(result, *, test="", flow=0, outcome=None):
    """A request/response run: the median completion time against the model's, the spread in the notes."""
    row = _skeleton("requests", result, test=test, flow=flow, outcome=outcome)
    fct = result.fct_s
    measured = result.fct_percentile(50) if fct else None
    expected = statistics.median(result.expected_s) if result.expected_s else None
    server = (result.sysctls or {}).get("server", {})
    row.update(
        nbytes=len(fct) * (result.request_size + result.response_size),
        buffers={"sndbuf_requested": result.sndbuf_requested, "rcvbuf_requested": result.rcvbuf_requested},
        cc=server.get("net.ipv4.tcp_congestion_control"),
        measured_s=_number(measured),
        expected_s=_number(expected),
        figure="p50 FCT",
        bound="requests",
        why=result.why,
        ratio=_time_ratio(expected, measured),
        rtt_s=_number(result.observed_rtt_s),
        requests={
            "count": len(fct),
            "request_bytes": result.request_size,
            "response_bytes": result.response_size,
            "new_connection": result.new_connection,
            "interval_s": result.interval,
            **({f"p{p}_s": _number(result.fct_percentile(p)) for p in (50, 90, 99, 100)} if fct else {}),
        },
        notes=(
            f"{len(fct)} requests of {result.request_size} B / {result.response_size} B"
            + (f"; p90 {format_time(result.fct_percentile(90))}, max {format_time(max(fct))}" if fct else "")
        ),
    )
    return row


def latency_row(result, *, test="", flow=0, outcome=None):
    """A latency probe: the RTT the load added at p95 against the queue the model says the load builds."""
    row = _skeleton("latency", result, test=test, flow=flow, outcome=outcome)
    try:
        idle, induced = result.idle_rtt_s, result.induced_latency_s(95)
        loaded = result.loaded_rtt_s(50)
    except ValueError:  # no idle or no loaded samples: nothing to judge
        idle = induced = loaded = None
    expected = None
    flows = result.flows.flows if result.flows is not None else []
    if flows:
        prediction = predict(flows[0])
        loaded_rtt, base = (prediction.loaded_rtt_s, prediction.conditions) if prediction else (None, None)
        if is_number(loaded_rtt) and base is not None:
            expected = max(0.0, loaded_rtt - base.rtt_s)
    row.update(
        measured_s=_number(induced),
        expected_s=_number(expected),
        figure="p95 added RTT",
        bound="queue" if expected is not None else None,
        ratio=_time_ratio(expected, induced) if expected else None,
        rtt_s=_number(idle),
        latency={
            "idle_rtt_s": _number(idle),
            "loaded_p50_s": _number(loaded),
            "induced_p95_s": _number(induced),
            "samples": len(result.samples),
            "interval_s": result.interval,
        },
        notes=(f"idle {format_time(idle)}, loaded p50 {format_time(loaded)}" if idle is not None else "no samples")
        + f"; {len(flows)} flow(s) beside the probe",
    )
    return row


def udp_row(result, *, test="", flow=0, outcome=None):
    """A constant-rate UDP stream: what it delivered of what it offered, its loss and one-way delay."""
    row = _skeleton("udp", result, test=test, flow=flow, outcome=outcome)
    offered = getattr(result.spec, "rate", None)  # Cbr.rate: payload bit/s
    delivered = result.throughput_bps
    row.update(
        nbytes=result.received * result.packet_size,
        duration_s=_number(result.ended_at - result.started_at),
        measured_bps=_number(delivered),
        expected_bps=_number(offered),
        bound="offered",
        ratio=delivered / offered if is_number(offered) and offered > 0 else None,
        emulator_drops=result.emulator_drops if result.qdiscs else None,
        udp={
            "sent": result.sent,
            "received": result.received,
            "send_errors": result.send_errors,
            "loss": result.loss,
            "packet_bytes": result.packet_size,
        },
        notes=f"UDP {format_rate(offered) if offered else '?'} offered, loss {result.loss * 100:.3g}%"
        + (f", one-way p50 {format_time(result.one_way_delay_s(50))}" if result.arrivals else ""),
    )
    return row


def flow_row(result, *, test="", flow=0, outcome=None):
    """The row of one TransferResult (or WindowProbe): full conditions plus key figures."""
    from ..results import transfer_of

    transfer = transfer_of(result)  # a WindowProbe's transfer, or the TransferResult itself
    probe = result if transfer is not result else None
    buffers, rbuffers = transfer.sender.buffers, transfer.receiver.buffers
    too_short = too_short_for_a_rate(transfer)
    measured = None if too_short else _number(_attr(transfer, "throughput_bps"))
    prediction = predict(transfer)
    expected = _number(prediction.bps) if prediction else None
    label, shares = _limited_by(transfer)
    events = _events(transfer)
    row = {
        "schema": SCHEMA,
        "test": test,
        "flow": flow,
        "outcome": outcome,
        "kind": "window_probe" if probe else "transfer",
        "kernel": transfer.kernel,
        "backend": guest.backend(),
        "direction": transfer.direction,
        "nbytes": transfer.nbytes,
        "upload_bytes": transfer.upload_bytes,
        "download_bytes": transfer.download_bytes,
        "duration_s": _number(_attr(transfer, "duration_s")),
        "lifetime_s": _number(transfer.lifetime_s),
        "link": link_record(transfer.link),
        "client": host_record(transfer.client),
        "server": host_record(transfer.server),
        "sysctls": transfer.sysctls or {},
        "buffers": {
            "sndbuf_requested": transfer.sndbuf_requested,
            "sndbuf": _attr(transfer, "effective_sndbuf", buffers.get("sndbuf")),
            "rcvbuf_requested": transfer.rcvbuf_requested,
            "rcvbuf": _attr(transfer, "effective_rcvbuf", rbuffers.get("rcvbuf")),
        },
        "cc": _attr(transfer, "cc", buffers.get("cc")),
        "measured_bps": measured,
        "active_bps": _number(_attr(transfer, "active_throughput_bps")),
        "expected_bps": expected,
        "bound": prediction.bound if prediction else None,
        "why": prediction.why if prediction else None,
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
        "link_changes": list(transfer.link_changes),
        "offloads": transfer.offloads or {},
        "host_contention_cpus": _number(transfer.host_contention_cpus),
        "host_steal_cpus": _number(_attr(transfer, "host_steal_cpus")),
        "sibling_cpus": _number(_attr(transfer, "sibling_cpus")),
        "cpus_polled": _attr(transfer, "cpus_polled"),
        # The takes voided beside hypervisor steal before this one (measure.run): never a silent retake.
        "void_takes": void_take_records(transfer),
        # What each shaped interface applied against what it was asked (analysis/impairments.py).
        "applied": [
            {
                "ifname": a.ifname,
                "direction": a.direction,
                "loss_asked": a.asked,
                "loss_correlation": a.correlation,
                "loss_expected": a.expected,
                "loss_applied": a.applied,
                "packets": a.offered,
                "lost": a.lost,
                "as_configured": a.as_configured,
            }
            for a in (_attr(transfer, "applied_impairments") or [])
        ],
        "applied_delay": _record(
            _attr(transfer, "applied_delay"),
            "asked_s",
            "floor_s",
            "sending_s",
            "tolerance_s",
            "below_s",
            "others_packets",
            "as_configured",
        ),
        "share": _record(_attr(transfer, "share"), "bps", "flows", "established", "why", "low_bps", "high_bps"),
        "host_limit": _record(_attr(transfer, "host_limit"), "bps", "runs_bps", "run_s", "kernel", "where", "source"),
        "applied_rate": _record(
            _attr(transfer, "applied_rate"), "asked_bps", "measured_bps", "standing_s", "runs", "as_configured"
        ),
        "applied_duplicate": _record(
            _attr(transfer, "applied_duplicate"), "asked", "expected", "segments", "dsacked", "resent", "as_configured"
        ),
        "applied_reorder": _record(
            _attr(transfer, "applied_reorder"), "asked", "expected", "segments", "seen", "as_configured"
        ),
        "artifacts": [str(p) for p in (_attr(transfer, "artifacts") or [])],
        "measured_s": None,
        "expected_s": None,
        "figure": None,
        "stalls": [
            {"kind": st.kind, "count": st.count, "seconds": list(st.seconds), "evidence": st.evidence}
            for st in (_attr(transfer, "stalls") or [])
        ],
        "notes": "; ".join(n for n in [too_short] + [_stall_note(st) for st in (_attr(transfer, "stalls") or [])] if n),
    }
    _judge_exchanges(row, transfer)
    return row


#: Payload a fresh connection sends in its first round trip (the initial window: 10 segments of 1448 B).
INITIAL_WINDOW_BYTES = 10 * 1448


def _record(found, *names):
    """An analysis' finding (an AppliedRate, a Share, an AppliedDelay) as data: the named attributes, or None where
    there is none (not judged, ran alone)."""
    if found is None or not all(hasattr(found, name) for name in names):
        return None
    return {name: _plain(getattr(found, name)) for name in names}


def _plain(value):
    """value with its tuples (named ones too: an AppliedRate's RateRuns) as lists: rows cross to xdist's controller,
    whose serializer takes only builtin types, and land in JSON."""
    if isinstance(value, (tuple, list)):
        return [_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value


def _stall_note(stall):
    """A stall in a few words: kind, count, time in all (a time share, for receiver_limited)."""
    if stall.kind == "receiver_limited":
        return f"receiver_limited {stall.total_s * 1e3:.0f} ms"
    return f"{stall.kind} stalls {stall.count}" + (f", {stall.total_s * 1e3:.0f} ms" if stall.seconds else "")


#: Exchanges from which a connection is judged by its latency, not its rate: a request/response conversation.
MIN_EXCHANGES = 2


def _judge_exchanges(row, transfer):
    """A captured connection of several request/response exchanges: judged by its p50 exchange time against the
    model's (the request's rounds, a round trip, then the response's rounds), not by a rate; the spread in the notes."""
    if transfer.capture is None:
        return
    exchanges = _attr(transfer, "exchanges") or []
    if len(exchanges) < MIN_EXCHANGES:
        return
    latencies = [e.latency_s for e in exchanges]
    expected = [_expected_exchange(transfer, e) for e in exchanges]
    measured = statistics.median(latencies)
    model = statistics.median(expected) if all(is_number(x) for x in expected) else None
    stalls = row["notes"].split("; ")[1:] if row["notes"].startswith("too short") else row["notes"].split("; ")
    row.update(
        measured_bps=None,
        measured_s=_number(measured),
        expected_s=_number(model),
        expected_bps=None,
        figure="p50 exchange",
        bound="requests",
        why="per exchange: the request, then the response, each in slow-start rounds from 10 segments at its way's "
        "rate, and a round trip",
        ratio=_time_ratio(model, measured),
        requests={
            "count": len(exchanges),
            "request_bytes": sum(e.request_bytes for e in exchanges),
            "response_bytes": sum(e.response_bytes for e in exchanges),
            **{f"p{p}_s": _number(_percentile(latencies, p)) for p in (50, 90, 99, 100)},
        },
        notes="; ".join(
            [
                f"{len(exchanges)} exchanges; p90 {format_time(_percentile(latencies, 90))}, "
                f"max {format_time(max(latencies))}"
            ]
            + [n for n in stalls if n]
        ),
    )


def _expected_exchange(transfer, exchange):
    """The model's time for one exchange, or None where it cannot say (a result without a link)."""
    try:
        return transfer.exchange_expected_s(exchange)
    except Exception:  # a stand-in result in a unit test, or a link the model cannot read
        return None


def too_short_for_a_rate(transfer):
    """Why a connection's goodput says nothing about the path ("" if it does): bytes that fit in one initial window
    never fill the path (sent at once, or a few small requests apart), so bytes over time measure the sender's
    stack or the application's pauses, not the path (docs/reports.md, "Session summary")."""
    nbytes = transfer.nbytes
    if isinstance(nbytes, int) and nbytes <= INITIAL_WINDOW_BYTES:
        return f"too short to judge a rate: {nbytes} B, within one initial window ({INITIAL_WINDOW_BYTES} B)"
    if transfer.between_samples:
        interval = getattr(transfer.samples, "interval", None)  # samples: None when none were taken
        apart = f" ({interval * 1e3:g} ms apart)" if interval else ""
        lifetime = transfer.lifetime_s
        lived = f", lived {format_time(lifetime)} from SYN to last FIN" if lifetime is not None else ""
        return (
            f"opened and closed between two samples{apart}{lived}: its {nbytes} B are exact, its rate is not timed "
            "(observe(capture=True) or a smaller sample_interval times it)"
        )
    return ""


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
    record["toward_client"] = dataclasses.asdict(link.toward_client)
    record["toward_server"] = dataclasses.asdict(link.toward_server)
    return record


def host_record(host):
    """An endpoint as data: the sysctls and cc the test asked for (the effective ones are in 'sysctls')."""
    if host is None:
        return None
    return {"sysctls": dict(host.sysctls or {}), "cc": host.cc}


def _builders():
    """(result type, row builder) of every kind a lab registers. (Imported when a row is made: a session that
    measures nothing never loads the result types.)"""
    from ..results import LatencyResult, RequestsResult, TransferResult, UdpResult, WindowProbe

    return (
        (RequestsResult, requests_row),
        (LatencyResult, latency_row),
        (UdpResult, udp_row),
        (TransferResult, flow_row),
        (WindowProbe, flow_row),
    )


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
