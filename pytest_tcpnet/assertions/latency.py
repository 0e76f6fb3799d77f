"""Request latency: the time each exchange took, against upper bounds per percentile."""

from __future__ import annotations

from ..model import format_time
from ..model.stats import percentile
from ..model.validation import check_number, is_number

__all__ = ["assert_request_latency"]

#: How many of the slowest exchanges a failure names.
SLOWEST = 5


def assert_request_latency(result, *, p50=None, p90=None, p99=None, max=None, percentiles=None):  # noqa: A002
    """Assert each exchange's latency stays under the bounds given (seconds): p50, p90, p99, max, or any percentile
    as ``percentiles={99.9: 0.05}`` (keys 0-100).

    result: an observed connection measured with a capture (its ``exchanges``) or Pair.requests()'s result (each
    request's completion time). A failure shows the distribution, the bounds it broke, the slowest exchanges and the
    connection's stalls and conditions.
    """
    bounds = _bounds(p50=p50, p90=p90, p99=p99, max=max, percentiles=percentiles)
    latencies, slowest, context = _latencies(result)
    broken = []
    for p, bound in bounds.items():
        value = percentile(latencies, p)
        if value > bound:
            broken.append(f"{_name(p)} {format_time(value)} > {format_time(bound)}")
    if not broken:
        return
    shown = ", ".join(f"{_name(p)} {format_time(percentile(latencies, p))}" for p in (50, 90, 99, 100))
    lines = [
        f"request latency over its bound: {'; '.join(broken)}",
        f"{len(latencies)} exchange(s): {shown}",
        f"slowest {len(slowest)}:",
        *(f"  {line}" for line in slowest),
    ]
    lines += context
    lines.append(_plots_line(result, bounds))
    raise AssertionError("\n".join(line for line in lines if line))


def _plots_line(result, bounds):
    """The exchanges' latency plot and the slowest one's time sequence, beside the connection's pcap ("" without)."""
    capture = getattr(result, "capture", None)
    if capture is None or not hasattr(result, "exchanges"):
        return ""
    from ..analysis.plots import PlotsUnavailable, plot_exchanges

    try:
        paths = plot_exchanges(result, capture.pcap.parent, bounds=[(_name(p), b) for p, b in bounds.items()])
    except PlotsUnavailable as exc:
        return f"plots: {exc}"
    except Exception as exc:  # a failing plot must never hide the assertion's own message
        return f"plots: could not be drawn ({type(exc).__name__}: {exc})"
    return "plots: " + ", ".join(str(p) for p in paths)


def _name(p):
    return "max" if p == 100 else f"p{p:g}"


def _bounds(**named):
    percentiles = named.pop("percentiles") or {}
    if not isinstance(percentiles, dict):
        raise TypeError(f"percentiles: a dict {{percentile: bound in seconds}}, got {percentiles!r}")
    bounds = {}
    for key, p in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100)):
        if named[key] is not None:
            bounds[p] = _bound(key, named[key])
    for p, bound in percentiles.items():
        if not is_number(p) or not 0 < p <= 100:
            raise ValueError(f"percentiles: a percentile is in (0, 100], got {p!r}")
        if p <= 1:
            raise ValueError(
                f"percentiles: {p!r} reads as a fraction; percentiles are 0-100 here (99 for the 99th, 99.9 for "
                "the 99.9th)"
            )
        bounds[float(p)] = _bound(f"percentiles[{p!r}]", bound)
    if not bounds:
        raise ValueError("assert_request_latency: give at least one bound (p50=, p90=, p99=, max= or percentiles=)")
    return bounds


def _bound(name, value):
    return float(check_number(name, value, 0, low_open=True, must="an upper bound in seconds, a number > 0"))


def _latencies(result):
    """Each exchange's latency, the slowest ones in words, and the result's context lines."""
    if hasattr(result, "fct_s"):  # Pair.requests()
        latencies = list(result.fct_s)
        order = sorted(range(len(latencies)), key=lambda i: -latencies[i])[:SLOWEST]
        slowest = [f"request #{i + 1}: {format_time(latencies[i])}" for i in order]
        context = [result.describe()]
    else:
        try:
            exchanges = result.exchanges
        except (AttributeError, ValueError) as exc:
            raise ValueError(f"assert_request_latency: {exc}") from None
        latencies = [e.latency_s for e in exchanges]
        slowest = [e.describe() for e in sorted(exchanges, key=lambda e: -e.latency_s)[:SLOWEST]]
        context = [result.describe()]
    if not latencies:
        raise ValueError(
            "assert_request_latency: this result holds no request/response exchanges (a connection that carried "
            "no request, or a one-way transfer)"
        )
    return latencies, slowest, context
