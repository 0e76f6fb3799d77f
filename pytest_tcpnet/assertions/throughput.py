"""Throughput checks: a measured goodput against the model's prediction (or a given rate), and what limited it."""

from ..model import expected_throughput, format_rate, format_size, format_time
from ..model.stats import mean_interval, trials_to_decide
from ..model.validation import check_integer, check_number
from .verdicts import judge_trials

__all__ = ["assert_throughput_within", "assert_limited_by"]


def assert_throughput_within(result, expected_bps=None, *, rel, trials=None, observed=False, confidence=None):
    """Assert a transfer's goodput is within ±rel of expected_bps, or of the model's prediction when it is None.

    result: a TransferResult, or a callable returning one; with a callable, `trials` (odd,
    default 3) measurements decide by majority, stopping once it is clear. With confidence
    (e.g. 0.95) and a callable, all `trials` (>= 2, default 5) run and the confidence interval of
    their mean ratio to the expectation must lie within ±rel; an interval that straddles a bound is
    undecided, and the failure says about how many trials would decide it. observed=True
    predicts from the window and RTT the flow saw (TCP_INFO snd_wnd, srtt: the window / RTT
    law alone) instead of from the buffer and the link. Returns the (last) result. A failure shows measured
    vs predicted, the binding bound, the conditions and the artifact paths.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not ours
    if not (isinstance(rel, (int, float)) and 0 < rel < 1):
        raise ValueError(f"rel: must be in (0, 1), got {rel!r}")
    if expected_bps is not None and not (isinstance(expected_bps, (int, float)) and expected_bps > 0):
        raise ValueError(f"expected_bps: must be > 0 bit/s (or None for the model's prediction), got {expected_bps!r}")
    if confidence is not None:
        return _within_with_confidence(result, expected_bps, rel, trials, observed, confidence)
    if callable(result):
        measure = result
        count = 3 if trials is None else trials

        def within(one):
            return abs(one.throughput_bps / _expected(one, expected_bps, observed)[0] - 1) <= rel

        passed, results, verdicts = judge_trials(measure, within, trials=count)
        if passed:
            return results[-1]
        failing = [r for r, ok in zip(results, verdicts) if not ok]
        header = (
            f"{verdicts.count(False)} of {len(results)} trials outside ±{rel:.0%} "
            f"(a majority of {count} decides): "
            + ", ".join(f"{format_rate(r.throughput_bps)}{'' if ok else ' (out)'}" for r, ok in zip(results, verdicts))
        )
        raise AssertionError(header + "\n" + _report(failing[-1], expected_bps, rel, observed))
    if trials is not None:
        raise ValueError(
            "trials: needs a callable that measures again (e.g. lambda: pair.transfer(...)), not a finished result"
        )
    expected, _ = _expected(result, expected_bps, observed)
    if abs(result.throughput_bps / expected - 1) <= rel:
        return result
    raise AssertionError(_report(result, expected_bps, rel, observed))


def _within_with_confidence(measure, expected_bps, rel, trials, observed, confidence):
    """All trials, then the interval of their mean ratio against [1 - rel, 1 + rel]."""
    __tracebackhide__ = True
    check_number("confidence", confidence, 0, 1, low_open=True, high_open=True, must="a probability in (0, 1)")
    if not callable(measure):
        raise ValueError(
            "confidence: needs a callable that measures again (e.g. lambda: pair.transfer(...)) and trials=N"
        )
    count = check_integer(
        "trials", 5 if trials is None else trials, 2, must="a whole number >= 2 (an interval needs two)"
    )
    results = [measure() for _ in range(count)]
    ratios = [r.throughput_bps / _expected(r, expected_bps, observed)[0] for r in results]
    mean, low, high = mean_interval(ratios, confidence)
    floor, ceiling = 1 - rel, 1 + rel
    if floor <= low and high <= ceiling:
        return results[-1]
    header = (
        f"the {confidence:.0%} confidence interval of the mean goodput ratio is {low:.3f}..{high:.3f} (mean "
        f"{mean:.3f} over {count} trials: "
        + ", ".join(f"{r:.3f}" for r in ratios)
        + f"), allowed {floor:.2f}..{ceiling:.2f}"
    )
    if high < floor or low > ceiling:
        verdict = "outside the tolerance"
    else:
        more = trials_to_decide(ratios, confidence, floor, ceiling)
        verdict = "undecided: the interval straddles a bound" + (
            f"; about {more} trials in all would decide it if the mean and spread stay ({more - count} more)"
            if more
            else "; the mean sits on the bound: no number of trials decides it"
        )
    raise AssertionError(f"{header}: {verdict}\n" + _report(results[-1], expected_bps, rel, observed))


def _expected(result, expected_bps, observed):
    if expected_bps is not None:
        return expected_bps, None
    prediction = expected_throughput(result, observed=observed)
    return prediction.bps, prediction


def _report(result, expected_bps, rel, observed):
    """pytest-style failure text: a measured vs predicted table, the binding bound, conditions, artifacts."""
    measured = result.throughput_bps
    expected, prediction = _expected(result, expected_bps, observed)
    source = "the model's" if prediction else "the expected"
    lines = [
        f"throughput {format_rate(measured)} is {measured / expected:.1%} of {source} {format_rate(expected)} "
        f"(allowed {1 - rel:.0%}..{1 + rel:.0%})",
        f"  {'':<12}{'measured':>16}  {'predicted':>16}",
        f"  {'goodput':<12}{format_rate(measured):>16}  {format_rate(expected):>16}",
    ]
    info = getattr(result, "sender_tcp_info", None) or {}
    if prediction is None and hasattr(result, "model_conditions"):  # a result that states its conditions
        try:
            prediction = expected_throughput(result, observed=observed)
        except (ValueError, AttributeError):  # no bound applies, or conditions it did not record
            prediction = None
    if prediction is not None and prediction.conditions is not None:
        c = prediction.conditions
        rtt = info.get("min_rtt")
        lines.append(
            f"  {'RTT':<12}{format_time(rtt / 1e6) if rtt else '?':>16}  "
            f"{format_time(prediction.loaded_rtt_s or c.rtt_s):>16}"
        )
        if "rwnd" in prediction.bounds:
            window = prediction.bounds["rwnd"] * c.rtt_s / 8
            seen = info.get("snd_wnd")
            lines.append(f"  {'rwnd':<12}{format_size(seen) if seen else '?':>16}  {format_size(window):>16}")
        lines.append(
            "  bounds: "
            + ", ".join(
                f"{name} {format_rate(bps)}{' <- binds' if name == prediction.bound else ''}"
                for name, bps in sorted(prediction.bounds.items(), key=lambda kv: kv[1])
            )
        )
        lines.append(f"  model: {prediction.why}")
        lines.append(f"  conditions: {c.describe()}")
    verdict = _limited_by(result)
    if verdict:
        label, shares, basis = verdict
        lines.append(f"  sender was {label}-limited" + (f": {_shares_text(shares)} ({basis})" if shares else ""))
        if label == "app" and prediction is not None and "app" not in prediction.bounds and measured < expected:
            # The model's bounds are the network's: an application that waits for its own ACKs is slower by design.
            lines.append(
                "  the application itself held the data back; the model knows no bound of the application's: "
                "if it has one (a stop-and-wait or windowed protocol), declare it, "
                "pair.observe(app_window=<bytes outstanding per application round trip>)"
            )
    describe = getattr(result, "describe", None)
    if callable(describe):
        lines.append("  " + describe().replace("\n", "\n  "))
    artifacts = getattr(result, "artifacts", None)
    if artifacts:
        lines.append("  artifacts: " + ", ".join(str(a) for a in artifacts))
    return "\n".join(lines)


def assert_limited_by(result, label):
    """Assert the sender spent most of its time limited by label ("rwnd", "sndbuf", "cwnd" or "app"); return the shares."""
    __tracebackhide__ = True  # pytest shows the caller's line, not ours
    from ..analysis.limits import LABELS, chrono_shares

    if label not in LABELS:
        raise ValueError(f"label: must be one of {', '.join(LABELS)}, got {label!r}")
    verdict = _limited_by(result)
    if verdict is None:
        raise AssertionError(
            f"cannot tell what limited the sender: no samples of its socket and no chrono counters "
            f"in its TCP_INFO (sample_interval off, or a kernel before 4.10)\n{result.describe()}"
        )
    got, shares, basis = verdict
    if got == label:
        return shares
    text = f"sender was {got}-limited, not {label}-limited: {_shares_text(shares)} of the transfer, from {basis}"
    if basis != "chrono":
        try:  # the kernel's own timing beside it, as a cross-check
            text += f"; the kernel's chrono counters: {_shares_text(chrono_shares(result.sender_tcp_info, getattr(result, 'sender_active_s', None)))}"
        except ValueError:
            pass
    raise AssertionError(f"{text}\n{result.describe()}")


def _limited_by(result):
    """(label, shares, basis) for a TransferResult or a look-alike that has TCP_INFO (and maybe samples); or None."""
    own = getattr(result, "limited_by_shares", None)
    if callable(own):
        return own()
    from ..analysis.limits import limited_by

    samples = result.sender_samples() if callable(getattr(result, "sender_samples", None)) else None
    try:
        return limited_by(getattr(result, "sender_tcp_info", None), getattr(result, "sender_active_s", None), samples)
    except ValueError:
        return None


def _shares_text(shares):
    return ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
