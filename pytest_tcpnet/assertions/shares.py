"""Verdicts on flows that shared a bottleneck: each flow against its share, and the group's fairness."""

from ..model import format_rate
from ..model.validation import check_number
from .throughput import assert_throughput_within

__all__ = ["assert_share_within", "assert_fair"]


def _flows(result, name):
    from ..results import ConcurrentResult, TransferResult  # only when judging: importing the plugin stays light

    if isinstance(result, (list, tuple)) and result and all(isinstance(flow, TransferResult) for flow in result):
        return list(result)
    if isinstance(result, ConcurrentResult):
        return list(result.flows)
    if isinstance(result, TransferResult):
        return [result]
    raise TypeError(f"{name}: expected a ConcurrentResult or one of its flows (a TransferResult), got {result!r}")


def _table(flows):
    """One line per flow: its goodput, its share and the ratio."""
    lines = []
    for i, flow in enumerate(flows):
        share = flow.share
        if share is not None and share.bps:
            owed = f"share {format_rate(share.bps)}, ratio {flow.throughput_bps / share.bps:.2f}"
        elif share is not None and share.ranged:
            owed = f"share {share.describe()}"
        else:
            owed = "no share predicted"
        lines.append(
            f"  flow {i}: {format_rate(flow.throughput_bps)}, cc {flow.cc}, RTT {flow.link.rtt_s * 1e3:.3g} ms; {owed}"
        )
    return "\n".join(lines)


def assert_share_within(result, *, rel):
    """Assert each flow's goodput is within ±rel of its share of the bottleneck it shared (the model's, with each
    flow's own bounds), or of the range the model gives (flows of different RTTs: from rel below its low end to rel
    above its high end). result: a ConcurrentResult (every flow is judged), a list of its flows, or one flow."""
    __tracebackhide__ = True
    check_number("rel", rel, 0, 1, low_open=True, high_open=True)
    flows = _flows(result, "result")
    for flow in flows:
        if flow.share is None:
            raise ValueError(
                "result: a flow that ran alone has no share (flows run together with Pair.concurrent or a "
                "dumbbell's concurrent() get one); judge it with assert_throughput_within"
            )
        if not flow.share.established and not flow.share.ranged:
            raise ValueError(
                f"result: no share to judge against: {flow.share.why}. Judge the group with assert_fair, or a "
                "flow with assert_throughput_within and a figure of your own"
            )
    failures = []
    for i, flow in enumerate(flows):
        if flow.share.ranged:
            low, high = flow.share.low_bps * (1 - rel), flow.share.high_bps * (1 + rel)
            if not low <= flow.throughput_bps <= high:
                failures.append(
                    f"flow {i}: {format_rate(flow.throughput_bps)} outside {format_rate(low)} to {format_rate(high)} "
                    f"(its share, {flow.share.describe()}, ±{rel:.0%}): {flow.share.why}\n{flow.describe()}"
                )
            continue
        try:
            assert_throughput_within(flow, rel=rel)
        except AssertionError as exc:
            failures.append(f"flow {i}: {exc}")
    if failures:
        raise AssertionError(
            f"{len(failures)} of {len(flows)} flows outside ±{rel:.0%} of their shares\n{_table(flows)}\n\n"
            + "\n\n".join(failures)
        )


def assert_fair(result, *, jain):
    """Assert flows that ran together shared fairly: Jain's index of their goodputs, each over its share where the
    model gives one (Jain, Chiu & Hawe 1984: x_i = measured / fair allocation), at least `jain`. result: a
    ConcurrentResult, or a list of the flows (a topology's observe(): `seen.flows`)."""
    __tracebackhide__ = True
    from ..results import ConcurrentResult, TransferResult, jain_index

    if isinstance(result, (list, tuple)) and result and all(isinstance(flow, TransferResult) for flow in result):
        result = ConcurrentResult(flows=list(result))
    if not isinstance(result, ConcurrentResult):
        raise TypeError(
            f"result: expected a ConcurrentResult (Pair.concurrent, a dumbbell's) or a list of its flows, got {result!r}"
        )
    check_number("jain", jain, 0, 1, low_open=True)
    flows = list(result.flows)
    if len(flows) < 2:
        raise ValueError(f"result: fairness needs two flows or more, got {len(flows)}")
    shares = [f.share.bps if f.share is not None else None for f in flows]
    normalized = all(shares)
    index = jain_index(f.throughput_bps / s for f, s in zip(flows, shares)) if normalized else result.jain_index
    if index < jain:
        basis = "each goodput over its share" if normalized else "the goodputs (no shares predicted)"
        raise AssertionError(
            f"Jain's index {index:.3f} < {jain:.3f} over {len(flows)} flows ({basis})\n{_table(flows)}\n"
            + result.describe()
        )
