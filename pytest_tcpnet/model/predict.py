"""Predict a bulk transfer's throughput from its conditions: the minimum of the bounds, naming the one that binds."""

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

from .kernel import KernelVersion
from .specs import MTU_FRAME_BYTES
from .tcp import mathis_throughput, window_limited_transfer_time
from .units import format_rate, format_size, format_time
from .validation import check_number
from .window import advertised_window, send_window

__all__ = [
    "Conditions",
    "HostLimit",
    "Predictable",
    "Prediction",
    "expected_throughput",
    "sustained_window",
    "PAYLOAD_PER_FRAME",
    "PAYLOAD_PER_FRAME_IPV6",
    "LOSS_BASED_CCS",
    "link_goodput",
    "loss_bound",
    "shaper_burst_bytes",
]

#: Payload bytes per full frame with TCP timestamps (1500 MTU - 20 IP - 32 TCP).
PAYLOAD_PER_FRAME = 1448
#: TCP payload per full frame over IPv6: its header is 20 bytes longer (40 against 20).
PAYLOAD_PER_FRAME_IPV6 = 1428

#: Congestion controls that halve (or cut by a fixed factor) on every loss, so Mathis' square-root
#: law bounds them. bbr (model-based) and the delay-based ones are left out: no loss bound applies.
LOSS_BASED_CCS = frozenset(
    {"reno", "cubic", "bic", "highspeed", "htcp", "scalable", "hybla", "westwood", "illinois", "yeah", "veno"}
)


def link_goodput(rate_bps, mss_bytes=PAYLOAD_PER_FRAME):
    """Payload rate a shaped link carries: the shaper counts whole frames, 1448 payload per 1514 bytes (IPv6: 1428)."""
    return rate_bps * mss_bytes / MTU_FRAME_BYTES


def shaper_burst_bytes(rate_bps, burst_s):
    """Bytes a token-bucket shaper at rate_bps sends at once after an idle spell: burst_s of its rate, at least two
    frames (the lab's htb burst: netlink.htb_burst_bytes)."""
    return max(2 * MTU_FRAME_BYTES, math.ceil(rate_bps / 8 * burst_s))


def loss_bound(cc, rtt_s, loss, mss_bytes=PAYLOAD_PER_FRAME):
    """Mathis' bound for a loss-based cc (bit/s); None where it does not apply (bbr and other non-loss-based ccs)."""
    if not loss or cc not in LOSS_BASED_CCS or not rtt_s:
        return None
    return mathis_throughput(mss_bytes, rtt_s, loss)


#: Other processes' load (CPUs) from which a calibration ran beside a busy host: hostload.CONTENTION_WARNING_CORES,
#: restated because the model reads no machine (tests/test_calibrate.py checks they agree).
BUSY_HOST_CPUS = 0.5


@dataclass(frozen=True)
class HostLimit:
    """What one unshaped flow carried on this host (kernel, backend) when the session calibrated it: the bound of a
    path no link slows, where the CPU that copies, checksums and forwards the bytes binds instead."""

    bps: float
    runs_bps: tuple
    run_s: float
    kernel: str
    where: str = "host"
    #: CPUs that processes outside the session kept busy while it was calibrated (hostload; None: unknown).
    contention_cpus: "float | None" = None
    #: Who gave the figure when it was not measured here (e.g. "--tcpnet-host-limit"): "" for a calibration.
    source: str = ""

    def __post_init__(self):
        check_number("bps", self.bps, 0, low_open=True, must="a finite number > 0")

    @property
    def beside_busy_host(self):
        """Whether processes outside the session kept half a CPU or more busy while it was calibrated."""
        return self.contention_cpus is not None and self.contention_cpus >= BUSY_HOST_CPUS

    def describe(self):
        """'one unshaped flow carried 3.1 Gbit/s on this host (best of 3 runs of 0.5 s: ...; kernel 6.1.0)'."""
        if self.source:
            return f"this {self.where} carries {format_rate(self.bps)} on an unshaped path ({self.source})"
        runs = ", ".join(format_rate(bps) for bps in self.runs_bps)
        busy = f"; {self.contention_cpus:.1f} CPUs busy outside the session" if self.beside_busy_host else ""
        return (
            f"one unshaped flow carried {format_rate(self.bps)} on this {self.where} when the session calibrated it "
            f"(median of {len(self.runs_bps)} runs of {format_time(self.run_s)}: {runs}; kernel {self.kernel}{busy})"
        )


@dataclass(frozen=True)
class Conditions:
    """What a bulk transfer ran under, as the model needs it (SI units; None where unknown or unlimited)."""

    kernel: str
    rtt_s: float
    rate_bps: "float | None" = None
    loss: float = 0.0
    cc: "str | None" = None
    so_sndbuf: "int | None" = None
    so_rcvbuf: "int | None" = None
    sender_sysctls: dict = field(default_factory=dict)
    receiver_sysctls: dict = field(default_factory=dict)
    write_chunk_bytes: "int | None" = 1 << 20
    window_bytes: "int | None" = None
    nbytes: "int | None" = None
    #: The bottleneck queue the spec builds (packets): where a window larger than the BDP waits.
    queue_packets: "int | None" = None
    #: The application's own bounds: bytes it keeps outstanding per round trip (a stop-and-wait
    #: protocol's chunk per application ACK), and the rate it writes or reads at (a paced end).
    app_window_bytes: "int | None" = None
    #: What the bottleneck's shaper sends at once after an idle spell (bytes on the wire; None: unknown, taken as 0):
    #: an application window that waits idle each round leaves this much of itself at line rate.
    burst_bytes: "int | None" = None
    app_rate_bps: "float | None" = None
    #: What sets app_rate_bps, for the model's `why` ("paced", or a program's option: "curl --limit-rate 200k").
    app_rate_by: str = "paced"
    #: The flow's share of a bottleneck it shares with others (model.shares; None: alone, or no established model)
    #: and why (also where no number is claimed).
    share_bps: "float | None" = None
    share_why: str = ""
    #: Payload bytes per full segment: 1448 over IPv4 with timestamps, 1428 over IPv6.
    mss_bytes: int = PAYLOAD_PER_FRAME
    #: The bottleneck's queue discipline when not a plain FIFO (a model.Queue): an AQM keeps the standing
    #: queue near its target instead of letting a loss-based flow fill queue_packets.
    queue: "object | None" = None
    #: What this host carries on a path no link slows (HostLimit.bps; None: not calibrated) and how it was measured.
    host_bps: "float | None" = None
    host_why: str = ""

    def __post_init__(self):
        KernelVersion.parse(self.kernel)
        if not (isinstance(self.rtt_s, (int, float)) and self.rtt_s >= 0 and math.isfinite(self.rtt_s)):
            raise ValueError(f"rtt_s: must be a finite number >= 0, got {self.rtt_s!r}")
        if self.rate_bps is not None and not self.rate_bps > 0:
            raise ValueError(f"rate_bps: must be > 0 or None (unlimited), got {self.rate_bps!r}")
        if not 0 <= self.loss < 1:
            raise ValueError(f"loss: must be in [0, 1), got {self.loss!r}")
        for name in ("queue_packets", "app_window_bytes", "burst_bytes", "app_rate_bps", "share_bps", "host_bps"):
            value = getattr(self, name)
            if value is not None:
                check_number(name, value, 0, low_open=True, must="a finite number > 0 or None")

    @classmethod
    def from_result(cls, result: "Predictable", *, observed: bool = False) -> "Conditions":
        """The conditions a result recorded: its own ``model_conditions`` (TransferResult builds them from its typed
        fields; docs/model.md says which it reads)."""
        return result.model_conditions(observed=observed)

    def describe(self):
        """One line: 'kernel 6.1.0, RTT 20 ms, 100 Mbit/s, loss 0, cubic, SO_RCVBUF 64 kB, SO_SNDBUF auto'."""
        return (
            f"kernel {self.kernel}, RTT {format_time(self.rtt_s)}, "
            f"{format_rate(self.rate_bps) if self.rate_bps else 'no rate limit'}, loss {self.loss:.3g}, "
            f"cc {self.cc or 'default'}, SO_RCVBUF {format_size(self.so_rcvbuf) if self.so_rcvbuf else 'auto'}, "
            f"SO_SNDBUF {format_size(self.so_sndbuf) if self.so_sndbuf else 'auto'}"
        )


@dataclass(frozen=True)
class Prediction:
    """The model's expected goodput: bps (the minimum), the binding bound's name, why, and every bound."""

    bps: float
    bound: str
    why: str
    bounds: dict
    conditions: "Conditions | None" = None
    #: The RTT the flow should see: the path's, plus the standing queue its own window builds.
    loaded_rtt_s: "float | None" = None


class Predictable(Protocol):
    """What the model can predict besides a Conditions: a result that states its own conditions (TransferResult)."""

    def model_conditions(self, *, observed: bool = False) -> Conditions: ...

    def model_phases(self, *, observed: bool = False, steady: bool = False) -> "list[tuple[Any, Conditions]]": ...


def phase_predictions(result: Predictable, *, observed=False, steady=False):
    """[(phase, Prediction)] of a flow across a changing link: each phase (result.phases) predicted with the link
    then in force; slow start counted in the first phase only (none with steady=True)."""
    return [
        (phase, expected_throughput(conditions))
        for phase, conditions in result.model_phases(observed=observed, steady=steady)
    ]


def _over_phases(predictions):
    """A flow across a changing link: each phase's prediction weighted by the time the flow spent in it."""
    spans = [phase.end_s - phase.start_s for phase, _ in predictions]
    bps = sum(p.bps * span for (_, p), span in zip(predictions, spans)) / sum(spans)
    why = "; ".join(
        f"phase {phase.number} ({format_time(span)}): {format_rate(p.bps)}, {p.bound}"
        for (phase, p), span in zip(predictions, spans)
    )
    return Prediction(
        bps,
        "schedule",
        f"the link changes: each phase's bound for its time ({why})",
        {f"phase {phase.number}": p.bps for phase, p in predictions},
    )


def expected_throughput(conditions_or_result: "Conditions | Predictable", *, observed: bool = False) -> "Prediction":
    """Predict goodput: min of link rate (header overhead), receive window / RTT, send buffer / RTT, loss bound.

    The bounds are steady-state rates; the smallest binds. With conditions.nbytes (a result's
    size) and an RTT, the prediction also counts the round trips slow start spends before
    cwnd reaches the binding window (link: the BDP). observed=True (results only) takes the
    window and RTT the flow itself saw (TCP_INFO snd_wnd and srtt): the window / RTT law alone.
    """
    if isinstance(conditions_or_result, Conditions):
        c = conditions_or_result
    elif not hasattr(conditions_or_result, "model_conditions"):
        raise TypeError(
            "expected_throughput: takes a model.Conditions or a result that states its conditions "
            f"(model_conditions(), as a TransferResult), got {type(conditions_or_result).__name__}"
        )
    else:
        phases = phase_predictions(conditions_or_result, observed=observed)
        if phases:
            return _over_phases(phases)
        c = conditions_or_result.model_conditions(observed=observed)
    bounds, reasons = {}, {}
    if c.rate_bps:
        bounds["link"] = link_goodput(c.rate_bps, c.mss_bytes)
        reasons["link"] = (
            f"the {format_rate(c.rate_bps)} shaper carries {c.mss_bytes} payload bytes "
            f"per {MTU_FRAME_BYTES}-byte frame" + (" (IPv6)" if c.mss_bytes == PAYLOAD_PER_FRAME_IPV6 else "")
        )
    if c.rtt_s > 0:
        if c.window_bytes:
            window, source = c.window_bytes, "observed in TCP_INFO (snd_wnd)"
        else:
            window = sustained_window(c)
            source = _window_source(c)
        bounds["rwnd"] = window * 8 / c.rtt_s
        reasons["rwnd"] = f"a {format_size(window)} receive window ({source}) per {format_time(c.rtt_s)} RTT"
        in_flight = send_window(c.so_sndbuf, kernel=c.kernel, sysctls=c.sender_sysctls, chunk_bytes=c.write_chunk_bytes)
        bounds["sndbuf"] = in_flight * 8 / c.rtt_s
        reasons["sndbuf"] = (
            f"at most {format_size(in_flight)} in flight under the send buffer "
            f"({'SO_SNDBUF ' + format_size(c.so_sndbuf) if c.so_sndbuf else 'tcp_wmem max'}) "
            f"per {format_time(c.rtt_s)} RTT"
        )
        mathis = loss_bound(c.cc or "cubic", c.rtt_s, c.loss, c.mss_bytes)
        if mathis is not None:
            bounds["loss"] = mathis
            reasons["loss"] = f"Mathis: MSS/RTT x 1.22/sqrt(p) at p = {c.loss:.3g} for {c.cc or 'cubic'}"
    app = []
    if c.app_rate_bps:
        app.append((c.app_rate_bps, f"the application moves {format_rate(c.app_rate_bps)} ({c.app_rate_by})"))
    if c.app_window_bytes and c.rtt_s > 0:
        # Each application round sends its window, then waits a round trip for the application's ACK. The window's
        # time on the bottleneck counts too (16 KB at 20 Mbit/s is 6.6 ms beside a 40 ms RTT), less what the shaper
        # sends at once: the tokens it gathered while the flow waited, up to its burst (10 kB at 20 Mbit/s under
        # UML). A window above the path's BDP thus keeps the link busy, and the link's own bound takes over.
        on_link, note, goodput = 0.0, ")", math.inf
        if c.rate_bps:
            goodput = link_goodput(c.rate_bps, c.mss_bytes)
            head_start = min((c.burst_bytes or 0) * c.mss_bytes / MTU_FRAME_BYTES, goodput * c.rtt_s / 8)
            on_link = max(0.0, c.app_window_bytes - head_start) * 8 / goodput
            if not c.burst_bytes:
                note = " plus the window's time on the link)"
            elif on_link:
                note = (
                    f" plus {format_time(on_link)} on the link for what the shaper does not send at once: "
                    f"{format_size(head_start)} of payload leaves in its {format_size(c.burst_bytes)} burst)"
                )
            else:
                note = f"; the shaper sends the whole window at once, in its {format_size(c.burst_bytes)} burst)"
        round_s = c.rtt_s + on_link
        if c.app_window_bytes * 8 / round_s < goodput * (1 - 1e-9):  # else the window keeps the link busy
            app.append(
                (
                    c.app_window_bytes * 8 / round_s,
                    f"the application keeps {format_size(c.app_window_bytes)} outstanding per round of "
                    f"{format_time(round_s)} (its own protocol: the {format_time(c.rtt_s)} RTT{note}",
                )
            )
    if app:
        bounds["app"], reasons["app"] = min(app)
    if c.host_bps:
        bounds["host"], reasons["host"] = c.host_bps, c.host_why or f"this host carries {format_rate(c.host_bps)}"
    # A share at the flow's own bound (to rounding: a time-weighted mean of it) leaves that bound binding, by its name.
    if c.share_bps is not None and c.share_bps < min(bounds.values(), default=math.inf) * (1 - 1e-9):
        bounds["share"], reasons["share"] = c.share_bps, c.share_why
    if not bounds:
        raise ValueError(f"no bound applies to these conditions ({c.describe()}): give the link a rate or an RTT")
    bound = min(bounds, key=bounds.__getitem__)
    bps, why = bounds[bound], f"{bound}-limited: {reasons[bound]}"
    loaded_rtt, queue_note = _standing_queue(c, bounds, bound)
    why += queue_note
    if c.share_why and c.share_bps is None:
        why += f"; as if alone: {c.share_why}"
    if c.nbytes and c.rtt_s > 0 and bound != "loss" and bps * c.rtt_s / 8 >= c.mss_bytes:
        # The binding rate moves one window of rate x RTT per round trip once cwnd has grown to it (a rate
        # under a segment per round trip grows no window: its time is the bytes at that rate).
        time_s = window_limited_transfer_time(c.nbytes, bps * c.rtt_s / 8, c.rtt_s, mss_bytes=c.mss_bytes)
        if c.nbytes * 8 / time_s < bps:
            bps = c.nbytes * 8 / time_s
            why += f"; {format_size(c.nbytes)} take {time_s / c.rtt_s:.0f} round trips with slow start"
    return Prediction(bps=bps, bound=bound, why=why, bounds=bounds, conditions=c, loaded_rtt_s=loaded_rtt)


def _standing_queue(c, bounds, bound):
    """(the RTT the flow sees, a note for `why`): a window beyond the BDP waits in the spec's own queue.

    The flow still moves at the link's rate, but every packet waits behind the excess: a
    cubic flow with a 6 MB window into a 1000-packet FIFO at 20 Mbit/s sees 600 ms more RTT,
    and a window-bound flow is judged against that RTT, not the configured one (docs/design.md, pitfall 8).
    """
    if bound != "link" or not c.rtt_s or not c.queue_packets:
        return c.rtt_s or None, ""
    windows = [bounds[name] * c.rtt_s / 8 for name in ("rwnd", "sndbuf") if name in bounds]
    if c.cc not in LOSS_BASED_CCS and c.cc is not None:
        return c.rtt_s, ""  # bbr and the delay-based ccs keep the queue near empty by design
    bdp = c.rate_bps * c.rtt_s / 8
    capacity = c.queue_packets * c.mss_bytes
    excess = min(windows, default=0) - bdp
    if excess <= 0:
        return c.rtt_s, ""
    standing = min(excess, capacity)
    held = c.queue.standing_bytes(c.rate_bps) if c.queue is not None else None
    if held is not None and held < standing:
        standing = held
        loaded = c.rtt_s + standing * 8 / link_goodput(c.rate_bps, c.mss_bytes)
        return loaded, (
            f"; the {format_size(min(windows))} window exceeds the {format_size(bdp)} BDP, but the "
            f"{c.queue.kind} AQM keeps ~{format_size(standing)} standing: RTT under load "
            f"~{format_time(loaded)}"
        )
    loaded = c.rtt_s + standing * 8 / link_goodput(c.rate_bps, c.mss_bytes)
    where = f"{c.queue.kind} " if c.queue is not None else ""
    note = (
        f"; the {format_size(min(windows))} window exceeds the {format_size(bdp)} BDP, so up to "
        f"{format_size(standing)} stand in the {c.queue_packets}-packet {where}bottleneck queue: RTT under load "
        f"~{format_time(loaded)}"
    )
    if excess > capacity:
        note += " (the queue overflows: a loss-based cc backs off on its drops)"
    return loaded, note


def sustained_window(c):
    """The receive window a bulk flow keeps seeing: the advertised maximum less one segment.

    When the receiver ACKs, the segment that triggered the ACK is usually still unread, so
    the window offered in steady state is one segment short of the maximum (docs/model.md,
    "Prediction", has the measured windows). It matters for windows of a few segments (C1).
    """
    window = advertised_window(c.so_rcvbuf, kernel=c.kernel, sysctls=c.receiver_sysctls)
    segment = 1460 if not KernelVersion.parse(c.kernel).uses_scaling_ratio else 1448
    return max(segment, window - segment)


def _window_source(c):
    version = KernelVersion.parse(c.kernel)
    rule = version.window_rule
    if not version.uses_scaling_ratio:
        rule += f" (tcp_adv_win_scale {c.receiver_sysctls.get('net.ipv4.tcp_adv_win_scale', 1)})"
    if c.so_rcvbuf:
        return f"SO_RCVBUF {format_size(c.so_rcvbuf)} doubled, {rule}"
    return f"tcp_rmem {c.receiver_sysctls.get('net.ipv4.tcp_rmem', 'default')}, {rule}"
