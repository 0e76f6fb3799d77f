"""Plots of a flow: tcptrace-style time-sequence graph, windows over time, throughput over time.

matplotlib is an optional extra (``pip install 'pytest-tcpnet[plots]'``), imported only when a plot
is drawn. The plot_* functions take plain data (unit-testable); plot_result reads a result.
"""

import textwrap
from dataclasses import asdict
from pathlib import Path

from ..errors import MissingCapability
from .series import acked_rate_series, capture_windows, ewma, suggest_interval, time_sequence

__all__ = [
    "PlotsUnavailable",
    "plot_time_sequence",
    "plot_windows",
    "plot_throughput",
    "plot_result",
    "plot_latency",
    "plot_schedule",
    "plot_exchanges",
    "conditions_title",
    "draw",
    "draw_elsewhere",
]


class PlotsUnavailable(MissingCapability):
    """matplotlib is not installed."""

    def __init__(self):
        super().__init__("matplotlib", "plots need matplotlib: pip install 'pytest-tcpnet[plots]'")


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotsUnavailable() from None
    matplotlib.use("Agg", force=False)  # files only, never a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path, title):
    fig.suptitle(textwrap.fill(title, 110), fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def plot_time_sequence(ts, path, *, title=""):
    """Draw a series.TimeSequence: segments as vertical bars, ACK and window-edge lines, events marked."""
    return draw("time_sequence", path, {**asdict(ts), "title": title})


def _draw_time_sequence(
    path, *, segments, retransmissions, acks, window_edge, zero_windows, window_full, probes, title
):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 6))
    if segments:
        ax.vlines(
            [t for t, _, _ in segments],
            [s for _, s, _ in segments],
            [e for _, _, e in segments],
            colors="black",
            linewidth=0.8,
            label="data segments",
        )
    if retransmissions:
        ax.vlines(
            [t for t, _, _ in retransmissions],
            [s for _, s, _ in retransmissions],
            [e for _, _, e in retransmissions],
            colors="red",
            linewidth=1.5,
            label="retransmissions",
        )
        ax.plot([t for t, _, _ in retransmissions], [e for _, _, e in retransmissions], "rx", markersize=5)
    if acks:
        ax.step(
            [t for t, _ in acks],
            [a for _, a in acks],
            where="post",
            color="tab:green",
            linewidth=1,
            label="ACK (cumulative)",
        )
    if window_edge:
        ax.step(
            [t for t, _ in window_edge],
            [w for _, w in window_edge],
            where="post",
            color="tab:olive",
            linewidth=1,
            label="receive window edge (ACK + window)",
        )
    if window_full:
        ax.plot(
            [t for t, _ in window_full],
            [s for _, s in window_full],
            "^",
            color="tab:orange",
            markersize=3,
            label=f"window full ({len(window_full)})",
        )
    if zero_windows:
        ax.plot(
            [t for t, _ in zero_windows],
            [a for _, a in zero_windows],
            "o",
            color="tab:purple",
            markersize=6,
            label=f"zero window ({len(zero_windows)})",
        )
    if probes:
        ax.plot(
            [t for t, _ in probes],
            [s for _, s in probes],
            "D",
            color="tab:blue",
            markersize=5,
            label=f"zero-window probes ({len(probes)})",
        )
    ax.set_xlabel("time since first data byte (s)")
    ax.set_ylabel("relative sequence number (bytes)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    return _save(fig, path, "time-sequence graph: " + title)


def _finish_over_time(fig, ax, path, ylabel, title, xlabel="time since first data byte (s)"):
    """Label a quantity-over-time plot (zero-based y axis, legend at the top right) and save it."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    return _save(fig, path, title)


def plot_windows(lines, path, *, title=""):
    """Draw {label: [(t_s, bytes)]} (advertised window, bytes in flight, cwnd, ...) against time."""
    return draw("windows", path, {"lines": lines, "title": title})


def _draw_windows(path, *, lines, title):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5))
    for label, points in lines.items():
        if points:
            ax.step([t for t, _ in points], [v / 1024 for _, v in points], where="post", linewidth=1, label=label)
    return _finish_over_time(fig, ax, path, "KiB", "windows over time: " + title)


def plot_throughput(
    rate, path, *, smoothed=None, predicted_bps=None, predicted_label="model", interval=None, title="", phases=None
):
    """Draw per-interval throughput [(t_s, bit/s)], its EWMA and the model's prediction, in Mbit/s; phases: a
    changing link's [{start, end, label, expected_bps}] (same clock), shaded, each with its own prediction."""
    return draw(
        "throughput",
        path,
        {
            "rate": rate,
            "smoothed": smoothed,
            "predicted_bps": predicted_bps,
            "predicted_label": predicted_label,
            "interval": interval,
            "title": title,
            "phases": phases or [],
        },
    )


def _draw_throughput(path, *, rate, smoothed, predicted_bps, predicted_label, interval, title, phases=()):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5))
    for number, phase in enumerate(phases):
        ax.axvspan(phase["start"], phase["end"], color="tab:grey", alpha=0.05 + 0.06 * (number % 2))
        ax.text(phase["start"], 0, f" {phase['label']}", fontsize=7, va="bottom")
        if phase.get("expected_bps"):
            ax.hlines(
                phase["expected_bps"] / 1e6,
                phase["start"],
                phase["end"],
                color="tab:red",
                linestyle="--",
                linewidth=1,
                label="model, per phase" if number == 0 else None,
            )
    if rate:
        width = interval or (rate[1][0] - rate[0][0] if len(rate) > 1 else 0)
        label = f"per {width * 1000:g} ms interval" if width else "per interval"
        ax.step(
            [t for t, _ in rate], [v / 1e6 for _, v in rate], where="pre", color="tab:blue", linewidth=1, label=label
        )
    if smoothed:
        ax.plot(
            [t for t, _ in smoothed], [v / 1e6 for _, v in smoothed], color="tab:orange", linewidth=1.5, label="EWMA"
        )
    if predicted_bps:
        ax.axhline(
            predicted_bps / 1e6,
            color="tab:red",
            linestyle="--",
            linewidth=1,
            label=f"{predicted_label}: {predicted_bps / 1e6:.3g} Mbit/s",
        )
    return _finish_over_time(fig, ax, path, "throughput (Mbit/s)", "throughput over time: " + title)


def _draw_latency(path, *, samples, idle_to, loaded_from, loaded_to, title):
    """RTT over time with the idle and loaded spans shaded, beside the CDFs of the two."""
    plt = _pyplot()
    fig, (over_time, cdf) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [2, 1]})
    over_time.axvspan(0, idle_to, color="tab:green", alpha=0.08, label="idle")
    over_time.axvspan(loaded_from, loaded_to, color="tab:red", alpha=0.08, label="loaded")
    over_time.plot(
        [t for t, _ in samples],
        [rtt * 1000 for _, rtt in samples],
        ".",
        markersize=2,
        color="tab:blue",
        label="probe RTT",
    )
    over_time.set_xlabel("time (s)")
    over_time.set_ylabel("RTT (ms)")
    over_time.legend(loc="upper left", fontsize="small")
    for label, color, values in (
        ("idle", "tab:green", [r for t, r in samples if t < idle_to]),
        ("loaded", "tab:red", [r for t, r in samples if loaded_from <= t <= loaded_to]),
    ):
        if values:
            ordered = sorted(v * 1000 for v in values)
            cdf.step(
                ordered,
                [(i + 1) / len(ordered) for i in range(len(ordered))],
                where="post",
                color=color,
                label=f"{label} ({len(ordered)})",
            )
    cdf.set_xlabel("RTT (ms)")
    cdf.set_ylabel("fraction of probes")
    cdf.legend(loc="lower right", fontsize="small")
    cdf.grid(alpha=0.3)
    return _save(fig, path, "latency under load: " + title)


def plot_latency(result, directory):
    """Draw a LatencyResult's RTT over time and CDFs into directory; [path]."""
    directory = Path(directory)
    title = conditions_title(result)
    path = directory / f"latency-{id(result):x}.png"
    return [
        draw(
            "latency",
            path,
            {
                "samples": [list(s) for s in result.samples],
                "idle_to": result.idle_to,
                "loaded_from": result.loaded_from,
                "loaded_to": result.loaded_to,
                "title": title,
            },
        )
    ]


def plot_schedule(rate, phases, path, *, title=""):
    """Draw the rate series [(t_s, bit/s)] against a changing link's phases [{start, end, expected_bps,
    judged_from, failed, label}]: each phase shaded (red where it failed), its expected rate as a step."""
    return draw("schedule", path, {"rate": rate, "phases": phases, "title": title})


def _draw_schedule(path, *, rate, phases, title):
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(10, 5))
    for number, phase in enumerate(phases):
        ax.axvspan(
            phase["start"],
            phase["end"],
            color="tab:red" if phase["failed"] else "tab:grey",
            alpha=0.12 if phase["failed"] else 0.05 + 0.05 * (number % 2),
        )
        if phase["judged_from"] is not None and phase["judged_from"] < phase["end"]:
            ax.axvline(phase["judged_from"], color="tab:grey", linestyle=":", linewidth=0.8)
        ax.hlines(
            phase["expected_bps"] / 1e6,
            phase["start"],
            phase["end"],
            color="tab:red",
            linestyle="--",
            linewidth=1.2,
            label="model, per phase" if number == 0 else None,
        )
        ax.text(phase["start"], phase["expected_bps"] / 1e6, f" {phase['label']}", fontsize=7, va="bottom")
    if rate:
        ax.step(
            [t for t, _ in rate],
            [v / 1e6 for _, v in rate],
            where="pre",
            color="tab:blue",
            linewidth=1,
            label="goodput",
        )
    return _finish_over_time(
        fig,
        ax,
        path,
        "throughput (Mbit/s)",
        "goodput against the link's schedule: " + title,
        xlabel="time since the schedule's start (s)",
    )


def _draw_exchanges(path, *, exchanges, expected_s, bounds, title):
    """Each exchange's latency at its start time beside the CDF of them all, the model's time and the bounds."""
    plt = _pyplot()
    fig, (over_time, cdf) = plt.subplots(1, 2, figsize=(14, 5), gridspec_kw={"width_ratios": [2, 1]})
    starts = [s for s, _ in exchanges]
    millis = [lat * 1000 for _, lat in exchanges]
    over_time.plot(starts, millis, ".", markersize=4, color="tab:blue", label=f"exchanges ({len(exchanges)})")
    ordered = sorted(millis)
    cdf.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], where="post", color="tab:blue")
    for ax, horizontal in ((over_time, True), (cdf, False)):
        line = ax.axhline if horizontal else ax.axvline
        if expected_s is not None:
            line(expected_s * 1000, color="tab:green", linestyle="--", label=f"model {expected_s * 1000:.3g} ms")
        for name, bound in bounds:
            line(bound * 1000, color="tab:red", linestyle=":", label=f"{name} bound {bound * 1000:.3g} ms")
    over_time.set_xlabel("request start (s since the capture began)")
    over_time.set_ylabel("request to last response byte (ms)")
    over_time.legend(loc="upper left", fontsize="small")
    cdf.set_xlabel("latency (ms)")
    cdf.set_ylabel("fraction of exchanges")
    cdf.legend(loc="lower right", fontsize="small")
    cdf.grid(alpha=0.3)
    return _save(fig, path, "request latency: " + title)


def plot_exchanges(result, directory, *, bounds=()):
    """Draw an observed connection's exchanges (latency over time and CDF, the model's time, bounds: [(name,
    seconds)]) and a time-sequence graph zoomed on the slowest exchange; [paths]."""
    exchanges = result.exchanges
    if not exchanges:
        return []
    directory = Path(directory)
    title = conditions_title(result)
    stem = f"exchanges-{id(result):x}"
    try:
        expected = sorted(result.exchange_expected_s(e) for e in exchanges)[len(exchanges) // 2]
    except Exception:  # the model cannot say for this result: the plot shows the measurements alone
        expected = None
    paths = [
        draw(
            "exchanges",
            directory / f"{stem}.png",
            {
                "exchanges": [[e.started, e.latency_s] for e in exchanges],
                "expected_s": expected,
                "bounds": [list(b) for b in bounds],
                "title": title,
            },
        )
    ]
    slowest = max(exchanges, key=lambda e: e.latency_s)
    margin = max(slowest.latency_s * 0.2, 0.001)
    capture = result.captures.get("client") or result.capture
    packets = [p for p in capture.packets if slowest.started - margin <= p.time <= slowest.ended + margin]
    if packets:
        zoom = f"slowest exchange #{slowest.number} ({slowest.latency_s * 1000:.3g} ms): {title}"
        paths.append(plot_time_sequence(time_sequence(packets), directory / f"{stem}-slowest-timeseq.png", title=zoom))
    return paths


_DRAWERS = {
    "exchanges": _draw_exchanges,
    "time_sequence": _draw_time_sequence,
    "windows": _draw_windows,
    "throughput": _draw_throughput,
    "latency": _draw_latency,
    "schedule": _draw_schedule,
}
# Who draws: this process's matplotlib, unless a --tcpnet-vm guest handed drawing to the host
# (vm/hostcall.py: under software emulation a plot costs seconds of FreeType, on the host milliseconds).
_elsewhere = None


def draw_elsewhere(delegate):
    """From now on delegate(kind, path, data) -> bool draws (False: it could not, draw here); None: draw here."""
    global _elsewhere
    _elsewhere = delegate


def draw(kind, path, data, *, here=False):
    """Draw plot kind (time_sequence, windows, throughput) from JSON-able data into path; return the path.

    here: with this process's matplotlib even when drawing was handed elsewhere (what the host does).
    """
    if kind not in _DRAWERS:
        raise ValueError(f"kind: no plot named {kind!r}; one of {', '.join(_DRAWERS)}")
    if not here and _elsewhere is not None and _elsewhere(kind, str(path), data):
        return Path(path)
    return _DRAWERS[kind](path, **data)


def conditions_title(result):
    """One line naming the conditions: link, endpoints, buffers, measured rate, kernel (what a result knows)."""
    parts = []
    link = getattr(result, "link", None)
    if link is not None:
        parts.append(f"link {link.describe()}")
    for role in ("client", "server"):
        host = getattr(result, role, None)
        if host is not None and hasattr(host, "describe") and host.describe() != "defaults":
            parts.append(f"{role} {host.describe()}")
    for name, label in (("sndbuf_requested", "SO_SNDBUF"), ("rcvbuf_requested", "SO_RCVBUF")):
        if getattr(result, name, None):
            parts.append(f"{label} {getattr(result, name)}")
    if getattr(result, "throughput_bps", None):
        parts.append(f"measured {result.throughput_bps / 1e6:.3g} Mbit/s")
    if getattr(result, "kernel", None):
        parts.append(f"kernel {result.kernel}")
    capture = getattr(result, "capture", None)
    if capture is not None:
        parts.append(f"captured at {capture.point}")
    return "; ".join(parts)


def plot_result(result, directory):
    """Write the plots a result supports into directory; return their paths.

    Uses only: result.capture (packets), result.series(field, side), result.rate_series,
    result.ewma_series, the conditions; a CaptureResult alone gives the capture-based plots.
    """
    if _elsewhere is None:
        _pyplot()  # fail early, with the install hint, before any work
    directory = Path(directory)
    capture = getattr(result, "capture", None)
    title = conditions_title(result)
    stem = capture.pcap.stem if capture is not None else f"flow-{id(result):x}"
    paths = []
    packets = capture.packets if capture is not None else []
    if packets:
        paths.append(plot_time_sequence(time_sequence(packets), directory / f"{stem}-timeseq.png", title=title))
    lines = capture_windows(packets) if packets else {}
    lines.update(_tcp_info_lines(result))
    if any(lines.values()):
        paths.append(plot_windows(lines, directory / f"{stem}-windows.png", title=title))
    duration = getattr(result, "duration_s", None) or (packets[-1].time - packets[0].time if packets else 0)
    interval = suggest_interval(duration)
    rate = _call(result, "rate_series", interval=interval) or (acked_rate_series(packets, interval) if packets else [])
    if rate:
        smoothed = _call(result, "ewma_series") or ewma(rate)
        phases = _phases(result)
        # A changing link: each phase's own prediction instead of their time-weighted mean.
        prediction = (None, None) if phases else _prediction(result)
        paths.append(
            plot_throughput(
                rate,
                directory / f"{stem}-throughput.png",
                smoothed=smoothed,
                predicted_bps=prediction[0],
                predicted_label=prediction[1],
                interval=interval,
                title=title,
                phases=phases,
            )
        )
    if packets and len(_exchanges_of(result)) >= 2:  # a conversation: its requests' latency too
        paths += plot_exchanges(result, directory)
    return paths


def _exchanges_of(result):
    """An observed connection's exchanges, [] for results without them."""
    try:
        return getattr(result, "exchanges", None) or []
    except ValueError:  # no capture of its own
        return []


def _phases(result):
    """A changing link's phases on the plots' clock (since the first data byte), with the model's rate for each."""
    if not getattr(result, "phases", None):
        return []
    offset = result.first_byte_at - result.schedule_origin
    try:
        from ..model.predict import phase_predictions

        predicted = {phase.number: prediction.bps for phase, prediction in phase_predictions(result, steady=True)}
    except Exception:  # the plot is still worth drawing without the model
        predicted = {}
    return [
        {
            "start": max(0.0, phase.start_s - offset),
            "end": phase.end_s - offset,
            "label": f"phase {phase.number}: {phase.link.describe()}",
            "expected_bps": predicted.get(phase.number),
        }
        for phase in result.phases
    ]


def _call(result, name, **kwargs):
    """result.name(**kwargs) when the result offers it and has data, else None."""
    method = getattr(result, name, None)
    if not callable(method):
        return None
    try:
        return method(**kwargs) or None
    except (KeyError, ValueError, TypeError):  # a series this result did not record
        return None


def _tcp_info_lines(result):
    """The sender's cwnd (bytes) and send window from sampled TCP_INFO, when the result has them."""
    series = getattr(result, "series", None)
    if not callable(series):
        return {}
    lines = {}
    try:
        cwnd = series("snd_cwnd", side="sender")
        mss = series("snd_mss", side="sender")
    except (KeyError, ValueError, TypeError):
        return {}
    if cwnd:
        size = (mss[-1][1] if mss else None) or 1448
        lines["cwnd (TCP_INFO, x MSS)"] = [(t, v * size) for t, v in cwnd if v is not None]
    return lines


def _prediction(result):
    """(bit/s, label) of the model's expected throughput for result's conditions, or (None, None)."""
    if getattr(result, "link", None) is None:
        return None, None
    try:
        from .. import model

        expected = getattr(model, "expected_throughput", None)
        if expected is None:
            return None, None
        prediction = expected(result)
        return prediction.bps, f"model ({prediction.bound})"
    except Exception:  # the model may not cover these conditions; the plot is still worth drawing
        return None, None
