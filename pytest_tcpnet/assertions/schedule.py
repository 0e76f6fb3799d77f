"""A flow across a link that changes (model.Schedule): in each phase, after settling, goodput as the model expects."""

import dataclasses

from ..model import format_rate, format_time
from ..model.predict import phase_predictions
from ..model.validation import check_number

__all__ = ["assert_follows_schedule"]

#: The shortest stretch of a phase, after its settling time, that is judged (shorter: reported, not judged).
MIN_JUDGED_S = 0.25


def default_settle_s(prediction):
    """Eight round trips of the phase's path (its base RTT), at least 0.5 s: what a window-bound or rate-probing
    flow needs to take a new link (a standing queue drains at the new rate at once, so it does not count). A
    loss-based cc growing into a faster link needs longer (cubic's window grows along its cubic curve: seconds
    at tens of ms of RTT): pass settle= for it."""
    return max(0.5, 8 * (prediction.conditions.rtt_s if prediction.conditions else 0.0))


def assert_follows_schedule(result, *, rel, settle=None, against="model", plot=True):
    """Assert a flow across a changing link followed it: in each phase, from `settle` seconds after the step took
    effect (None: default_settle_s, a few RTTs of the phase, at least 0.5 s) to the phase's end, goodput is within
    ±rel of what the model expects for that phase (against="model": the link's rate, or the window / RTT bound
    of a window-bound flow, or the application's own bound) or of the link's payload rate alone
    (against="link": the flow must fill every phase's link). A failure names each phase outside, with expected
    and measured figures, and draws the rate series against the schedule (plot=False: no plot). Returns the
    phases judged as [(phase, measured, expected)].
    """
    __tracebackhide__ = True
    if not (isinstance(rel, (int, float)) and 0 < rel < 1):
        raise ValueError(f"rel: must be in (0, 1), got {rel!r}")
    if settle is not None:
        check_number("settle", settle, 0, must=">= 0 seconds (or None for a few RTTs of each phase)")
    if against not in ("model", "link"):
        raise ValueError(f"against: must be 'model' or 'link', got {against!r}")
    if not getattr(result, "link", None) or not result.link.changing:
        raise ValueError(
            "result: its link never changes (give a Link field a Schedule); "
            "assert_throughput_within judges a fixed link"
        )
    phases = phase_predictions(result, steady=True)  # the flow is running when the link changes
    if against == "link":
        phases = [(phase, _link_only(prediction)) for phase, prediction in phases]
    if not phases:
        raise ValueError("result: the flow ended before the schedule started (no phase to judge)")
    rows, judged, failed = [], [], []
    for phase, prediction in phases:
        wait = default_settle_s(prediction) if settle is None else settle
        start = phase.start_s + wait
        if phase.end_s - start < MIN_JUDGED_S:
            rows.append((phase, prediction, None, start, "too short to judge after settling"))
            continue
        measured = result.goodput_between(start, phase.end_s)
        ok = abs(measured / prediction.bps - 1) <= rel
        rows.append((phase, prediction, measured, start, "ok" if ok else "OUTSIDE"))
        judged.append((phase, measured, prediction.bps))
        if not ok:
            failed.append(phase)
    if not judged:
        raise AssertionError(
            "no phase lasted "
            + format_time(MIN_JUDGED_S)
            + " beyond its settling time:\n"
            + _table(rows, rel)
            + "\n"
            + result.describe()
        )
    if not failed:
        return judged
    names = ", ".join(f"phase {p.number} ({p.link.describe()})" for p in failed)
    text = (
        f"{len(failed)} of {len(judged)} phases outside ±{rel:.0%} of "
        f"{'the model' if against == 'model' else 'the link rate'}: {names}\n"
        + _table(rows, rel)
        + "\n"
        + result.describe()
    )
    if plot:
        text += _plot(result, rows)
    raise AssertionError(text)


def _link_only(prediction):
    """The prediction's link bound alone (what the flow must carry to fill the link)."""
    if "link" not in prediction.bounds:
        raise ValueError("against='link': a phase without a rate has no link rate to fill; judge it against the model")
    return dataclasses.replace(
        prediction,
        bps=prediction.bounds["link"],
        bound="link",
        why=f"the link's payload rate (the model alone would say {format_rate(prediction.bps)}, "
        f"{prediction.bound}-bound)",
    )


def _table(rows, rel):
    lines = [
        f"  {'phase':<7}{'span (s)':>14}  {'judged from':>11}  {'measured':>14}  {'expected':>14}  "
        f"{'ratio':>6}  bound, verdict"
    ]
    for phase, prediction, measured, start, verdict in rows:
        lines.append(
            f"  {phase.number:<7}{f'{phase.start_s:.2f}-{phase.end_s:.2f}':>14}  {start:>11.2f}  "
            f"{format_rate(measured) if measured is not None else '-':>14}  {format_rate(prediction.bps):>14}  "
            f"{(f'{measured / prediction.bps:.2f}' if measured is not None else '-'):>6}  "
            f"{prediction.bound}, {verdict}"
        )
        lines.append(f"  {'':<7}link {phase.link.describe()}; model: {prediction.why}")
    return "\n".join(lines)


def _plot(result, rows):
    """The rate series against the schedule, in the result's artifacts; the line naming it (or why none)."""
    from pathlib import Path

    from ..analysis.plots import PlotsUnavailable, conditions_title, plot_schedule

    directory = result.artifact_dir
    if directory is None:
        return ""
    offset = result.first_byte_at - result.schedule_origin
    rate = [(t + offset, bps) for t, bps in result.rate_series(0.1)]
    phases = [
        {
            "start": phase.start_s,
            "end": phase.end_s,
            "expected_bps": prediction.bps,
            "judged_from": start,
            "failed": verdict == "OUTSIDE",
            "label": f"phase {phase.number}: {phase.link.describe()}",
        }
        for phase, prediction, _, start, verdict in rows
    ]
    try:
        path = plot_schedule(
            rate, phases, Path(directory) / f"schedule-{id(result):x}.png", title=conditions_title(result)
        )
    except PlotsUnavailable as exc:
        return f"\n(no plot: {exc})"
    result._artifacts.append(path)
    return f"\nplot: {path}"
