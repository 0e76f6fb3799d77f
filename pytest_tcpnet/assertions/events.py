"""TCP expert-event checks on a capture: window full, zero window, retransmissions, loss signatures.

Each takes a transfer result (anything with ``.capture`` and ``.describe()``) or a CaptureResult;
a failure shows the counts, the first offending packets, the conditions and the pcap/plot paths.
"""

from ..model.validation import check_integer, check_number

__all__ = [
    "assert_no_window_full",
    "assert_window_full",
    "assert_zero_window",
    "assert_no_retransmissions",
    "assert_loss_signature",
]

_SHOWN = 5
_HOW_TO_CAPTURE = (
    "no capture was taken for this result: ask for one with `pair.transfer(..., capture=True)`, "
    "or wrap the workload: `with Capture(pair.server) as cap: ...` and check `cap.result`"
)


def assert_no_window_full(result, *, after=None):
    """Assert the sender never filled the receiver's advertised window (tshark's "TCP Window Full").

    after: None (the whole capture), a time in seconds from the capture's first packet, or
    "slow_start": from the moment the receiver's advertised window first reached 90% of its
    largest. An autotuned receiver on a fast path grows its window a round trip behind the
    sender's cwnd, so a few Window Full events in the first milliseconds are the kernel's
    start-up, not a window that bounds the flow (docs/design.md, pitfall 9).
    """
    capture = _capture_of(result)
    _refuse_incomplete(result, capture, "no TCP Window Full")
    start = _window_full_start(capture, after)
    if start is None:
        count, skipped, since = capture.events["window_full"], 0, ""
    else:
        flagged = [p for p in capture.packets if "window_full" in p.expert]
        count = sum(1 for p in flagged if p.time >= start)
        skipped = len(flagged) - count
        since = f" after {start * 1e3:.1f} ms ({after if isinstance(after, str) else 'given'}; {skipped} before it)"
    if count:
        _fail(
            result,
            capture,
            f"{count} TCP Window Full events{since}: the sender stopped because the receive window was full",
            "window_full",
            since=start,
        )


def _window_full_start(capture, after):
    """Seconds from the capture's start from which Window Full counts (None: from the start)."""
    if after is None:
        return None
    if after == "slow_start":
        windows = [(p.time, p.window) for p in capture.packets if p.direction == "ack"]
        if not windows:
            return None
        largest = max(w for _, w in windows)
        return next(t for t, w in windows if w >= 0.9 * largest)
    return float(check_number("after", after, 0, must="None, 'slow_start' or seconds >= 0"))


def assert_window_full(result, at_least=1):
    """Assert the sender filled the receive window at least `at_least` times."""
    _assert_at_least(result, "window_full", "TCP Window Full", at_least)


def assert_zero_window(result, at_least=1):
    """Assert the receiver advertised a zero window at least `at_least` times (its application stopped reading)."""
    _assert_at_least(result, "zero_window", "TCP ZeroWindow", at_least)


def _assert_at_least(result, kind, label, at_least):
    """Fail unless the capture counted at least `at_least` events of `kind`."""
    _check_count("at_least", at_least)
    capture = _capture_of(result)
    count = capture.events[kind]
    if count < at_least:
        missing = capture.missing
        gap = f" (the capture misses {missing} packets: some may have been among them)" if missing else ""
        _fail(result, capture, f"{count} {label} events, expected at least {at_least}{gap}", None)


def assert_no_retransmissions(result):
    """Assert no segment was retransmitted (any kind: timeout, fast, spurious)."""
    capture = _capture_of(result)
    _refuse_incomplete(result, capture, "no retransmissions")
    kinds = ("retransmission", "fast_retransmission", "spurious_retransmission")
    if any(capture.events[k] for k in kinds):
        first = next(k for k in kinds if capture.events[k])
        _fail(result, capture, "retransmissions: " + ", ".join(f"{k} {capture.events[k]}" for k in kinds), first)


def assert_loss_signature(result, loss, *, factor=3.0, dup_ack_factor=None):
    """Assert resent segments and duplicate ACKs per data segment are of the order of a random loss rate.

    Resent segments per data segment must lie within [loss / factor, loss * factor]: each lost
    segment is sent again about once. Duplicate ACKs (within dup_ack_factor, default factor)
    scale with the window: every segment that arrives behind a hole draws one, so a loss costs
    about as many as there are segments in flight (the capture's mean, see
    CaptureResult.segments_in_flight): the allowed range is [loss / f, loss * max(1, W) * f]
    (docs/capture.md, "Assertions", has measured counts). A resend is what tshark flags
    "Retransmission" or "Out-Of-Order": it calls a resent segment out-of-order when it follows
    the previous one by less than an RTT, which a sender-side capture of a short-RTT flow does for
    most fast retransmissions.
    """
    if not 0 < loss < 1:
        raise ValueError(f"loss: must be a fraction in (0, 1) (0.01 for 1%), got {loss!r}")
    for name, value in (("factor", factor), ("dup_ack_factor", dup_ack_factor)):
        if value is not None and not value > 1:
            raise ValueError(f"{name}: must be > 1 (the allowed ratio either way), got {value!r}")
    capture = _capture_of(result)
    segments = max(1, capture.data_segments)
    resent = capture.resent_segments
    window = max(1.0, capture.segments_in_flight or 1.0)
    dup_factor = dup_ack_factor or factor
    checks = (
        (
            "resent segment",
            "retransmission",
            resent,
            loss / factor,
            loss * factor,
            f"loss {loss:.2%}, factor {factor:g}",
        ),
        (
            "duplicate_ack",
            "duplicate_ack",
            capture.events["duplicate_ack"],
            loss / dup_factor,
            loss * window * dup_factor,
            f"loss {loss:.2%} x {window:.1f} segments in flight on average, factor {dup_factor:g}",
        ),
    )
    problems = []
    for label, kind, count, low, high, basis in checks:
        rate = count / segments
        if not low <= rate <= high:
            problems.append(
                (
                    kind,
                    f"{label} rate {rate:.3%} ({count} / {capture.data_segments} data segments) "
                    f"is not within {low:.3%}..{high:.3%} ({basis})",
                )
            )
    if problems:
        _fail(result, capture, "\n".join(text for _, text in problems), problems[0][0])


def _check_count(name, value):
    check_integer(name, value, 1, must="an int >= 1")


def _capture_of(result):
    """The CaptureResult of result (or result itself); an AssertionError explaining how to get one."""
    capture = getattr(result, "capture", None)
    if capture is None:
        conditions = _conditions(result)
        raise AssertionError(_HOW_TO_CAPTURE + (f"\n{conditions}" if conditions else ""))
    if not hasattr(capture, "events") or not hasattr(capture, "offending"):
        raise TypeError(f"result.capture: expected a CaptureResult, got {capture!r}")
    return capture


def _refuse_incomplete(result, capture, claim):
    """An absence cannot be shown by a capture that misses packets (dumpcap dropped some, or lost a block when it
    stopped): the packet that disproves the claim may be one of them. Fail, saying so, rather than pass."""
    missing = capture.missing
    if missing:
        _fail(
            result,
            capture,
            f"cannot judge '{claim}': the capture misses {missing} of the {capture.received} packets the kernel handed "
            "it (dropped, or lost when it stopped), so the packets that show otherwise may be among them; "
            "capture fewer packets (a narrower filter, a smaller snaplen) or a shorter flow",
            None,
        )


def _conditions(result):
    describe = getattr(result, "describe", None)
    return describe() if callable(describe) else ""


def _fail(result, capture, headline, kind, since=None):
    """Raise an AssertionError: headline, counts, offending packets (from `since` s on), conditions, pcap and plots."""
    lines = [headline, "counts: " + ", ".join(f"{k} {v}" for k, v in capture.events.items())]
    if kind:
        lines.append(f"first {kind} packets:")
        offending = [p for p in capture.packets if kind in p.expert and (since is None or p.time >= since)]
        lines += [f"  {p.brief()}" for p in offending[:_SHOWN]]
    conditions = _conditions(result) if result is not capture else ""
    if conditions:
        lines.append(conditions)
    lines.append(capture.describe())
    lines.append(_plots_line(result, capture))
    raise AssertionError("\n".join(lines))


def _plots_line(result, capture):
    """Draw the plots beside the pcap so the failure comes with a picture (when matplotlib is installed)."""
    from ..analysis.plots import PlotsUnavailable, plot_result

    try:
        paths = plot_result(result, capture.pcap.parent)
    except PlotsUnavailable as exc:
        return f"plots: {exc}"
    except Exception as exc:  # a failing plot must never hide the assertion's own message
        return f"plots: could not be drawn ({type(exc).__name__}: {exc})"
    return "plots: " + ", ".join(str(p) for p in paths)
