"""The other result kinds: UDP streams, flows run at once, latency under load, request/response, a window probe."""

import dataclasses
import os
from dataclasses import dataclass, field
from typing import NamedTuple

from ..model import format_rate, format_size, format_time
from ..model.stats import percentile
from ..records import RequestTimes
from .transfer import (
    TransferResult,
    _bytes_at,
    _plot_into,
    busy_host_lines,
    kernel_words,
    router_drops,
    void_take_lines,
)

__all__ = [
    "transfer_of",
    "UdpResult",
    "ConcurrentResult",
    "LatencyResult",
    "RequestsResult",
    "WindowProbe",
    "WorkloadRun",
    "REGISTERED_KINDS",
    "jain_index",
    "with_take",
]


def jain_index(values):
    """Jain's fairness index of some rates: 1 when all are equal, 1/n when one takes everything."""
    values = list(values)
    if not values or any(v < 0 for v in values):
        raise ValueError(f"values: need one or more non-negative rates, got {values!r}")
    total = sum(values)
    squares = sum(v * v for v in values)
    return 1.0 if squares == 0 else total * total / (len(values) * squares)


@dataclass(frozen=True, eq=False)
class UdpResult:
    """A CBR stream (model.Cbr) as its receiver saw it: loss, one-way delay (the lab's one clock), rate."""

    spec: object
    sent: int
    send_errors: int
    arrivals: list  # [(seq, sent_at, received_at)], monotonic seconds
    packet_size: int
    started_at: float
    ended_at: float
    link: object = None
    #: The takes of its measurement voided beside hypervisor steal before the one kept (measure.run), and the path's
    #: router qdisc counters over the kept take ({ifname: [stats deltas]}): set by the lab (with_take).
    void_takes: tuple = ()
    qdiscs: dict = field(default_factory=dict, repr=False)
    #: Whether idle CPUs were kept polling while it ran (TransferResult.cpus_polled).
    cpus_polled: "bool | None" = None

    @property
    def received(self):
        return len(self.arrivals)

    @property
    def loss(self):
        """The share of sent datagrams that never arrived."""
        return 1 - self.received / self.sent if self.sent else 0.0

    @property
    def one_way_delays_s(self):
        """Each received datagram's one-way delay (s), in arrival order."""
        return [received - sent for _, sent, received in self.arrivals]

    def one_way_delay_s(self, p=50):
        """A percentile (0..100) of the one-way delay."""
        return percentile(self.one_way_delays_s, p)

    @property
    def throughput_bps(self):
        """Payload received per second, from the first send to the last arrival (a queue drains after the sender ends)."""
        end = max((received for _, _, received in self.arrivals), default=self.ended_at)
        return self.received * self.packet_size * 8 / max(1e-6, end - self.started_at)

    @property
    def emulator_drops(self):
        """Packets the router's qdiscs dropped over the kept take (this stream's and whatever crossed beside it)."""
        return router_drops(self.qdiscs)

    def describe(self):
        """Rate, loss and one-way delay, one line (and one naming the takes voided before it, if any)."""
        delays = (
            f"one-way delay p50 {format_time(self.one_way_delay_s(50))}, p95 {format_time(self.one_way_delay_s(95))}"
            if self.arrivals
            else "nothing arrived"
        )
        line = (
            f"{self.spec.describe()}: {self.sent} sent ({self.send_errors} refused locally), {self.received} "
            f"received, loss {self.loss * 100:.3g}%, {format_rate(self.throughput_bps)} received; {delays}"
        )
        return "\n".join([line, *void_take_lines(self.void_takes)])


@dataclass(frozen=True, eq=False)
class ConcurrentResult:
    """Several flows that shared a pair at once (Pair.concurrent): each flow's result, their sum and fairness.

    udp: the CBR streams (UdpResult) that ran beside them, if any; the TCP figures count TCP only.
    """

    flows: list
    udp: list = field(default_factory=list)

    @property
    def total_bps(self):
        """Bytes of every flow over the span from the first flow's first byte to the last flow's last byte."""
        start = min(f.first_byte_at for f in self.flows)
        end = max(f.receiver.last_byte_at for f in self.flows)
        return sum(f.nbytes for f in self.flows) * 8 / max(1e-6, end - start)

    @property
    def jain_index(self):
        """Jain's fairness index over the flows' goodputs."""
        return jain_index(f.throughput_bps for f in self.flows)

    def rates_between(self, start_s, end_s):
        """Each flow's goodput between two times (seconds from the earliest first byte): steady state without start-up."""
        if not 0 <= start_s < end_s:
            raise ValueError(f"start_s/end_s: need 0 <= start_s < end_s, got {start_s!r}, {end_s!r}")
        origin = min(f.first_byte_at for f in self.flows)
        rates = []
        for flow in self.flows:
            points = flow._cumulative_bytes()
            moved = _bytes_at(points, origin + end_s) - _bytes_at(points, origin + start_s)
            rates.append(moved * 8 / (end_s - start_s))
        return rates

    @property
    def beside_busy_host(self):
        """Whether any of the flows ran beside a busy host (TransferResult.beside_busy_host)."""
        return any(flow.beside_busy_host for flow in self.flows)

    def describe(self):
        """Each flow's goodput and cc, the sum and the fairness index."""
        lines = [f"{len(self.flows)} flows: total {format_rate(self.total_bps)}, Jain index {self.jain_index:.3f}"]
        lines += [
            f"  flow {i}: {format_rate(f.throughput_bps)}, cc {f.cc}, {format_size(f.nbytes)}"
            for i, f in enumerate(self.flows)
        ]
        lines += [f"  {line}" for u in self.udp for line in u.describe().splitlines()]
        lines.append(f"link: {self.flows[0].link.describe()}; kernel: {kernel_words(self.flows[0].kernel)}")
        lines += busy_host_lines([f.host_contention_cpus for f in self.flows], "these flows")
        if not self.udp:  # a stream's lines name the retake already
            lines += void_take_lines(self.flows[0].void_takes)
        return "\n".join(lines)


@dataclass
class LatencyResult:
    """A latency probe's RTTs idle and beside load (Pair.latency_under_load): the queue a path adds under load.

    samples: [(seconds since the probe started, rtt_s)], the path's RTT as ping sees it (kernel receive
    timestamps, the echo server's hold time taken out); app_samples: the same exchanges timed by the
    application, which adds both ends' wake-ups; stamped: False where the kernel gave no timestamps
    (samples are then the application's); loaded_from/loaded_to: the span (same clock) in which the
    flows moved data; flows: their ConcurrentResult (None without flows).
    """

    samples: list
    app_samples: list
    stamped: bool
    idle_to: float
    loaded_from: float
    loaded_to: float
    interval: float
    link: object
    kernel: str
    flows: "ConcurrentResult | None" = None
    udp: list = field(default_factory=list)
    artifact_dir: "os.PathLike | str | None" = None
    #: As UdpResult's: the takes voided before the kept one, the path's router qdisc counters over it, whether idle
    #: CPUs were kept polling.
    void_takes: tuple = ()
    qdiscs: dict = field(default_factory=dict, repr=False)
    cpus_polled: "bool | None" = None

    def __post_init__(self):
        self._artifacts = []

    @property
    def idle_samples(self):
        """RTTs before the flows started (s)."""
        return [rtt for t, rtt in self.samples if t < self.idle_to]

    def loaded_samples(self, after=0.0):
        """RTTs while the flows moved data (s); `after` skips that many seconds of their start-up."""
        return [rtt for t, rtt in self.samples if self.loaded_from + after <= t <= self.loaded_to]

    @property
    def idle_rtt_s(self):
        """The median idle RTT."""
        return percentile(self.idle_samples, 50)

    def loaded_rtt_s(self, p=50, *, after=0.0):
        """The p-th percentile of the RTT under load."""
        return percentile(self.loaded_samples(after), p)

    def induced_latency_s(self, p=95, *, after=0.0):
        """What the load added: the loaded RTT's p-th percentile minus the idle median."""
        return self.loaded_rtt_s(p, after=after) - self.idle_rtt_s

    def describe(self):
        """Idle and loaded RTTs, the load, the link."""
        app_idle = percentile([rtt for t, rtt in self.app_samples if t < self.idle_to], 50)
        lines = [
            f"latency probe (TCP request/response every {format_time(self.interval)}"
            + ("" if self.stamped else ", no kernel timestamps: application times")
            + "): "
            f"{len(self.idle_samples)} idle samples, median {format_time(self.idle_rtt_s)}"
            + (f" (the application saw {format_time(app_idle)}: the endpoints' wake-ups)" if self.stamped else "")
        ]
        loaded = self.loaded_samples()
        if loaded:
            lines.append(
                "under load: "
                + ", ".join(f"p{p} {format_time(percentile(loaded, p))}" for p in (50, 95, 99))
                + f" ({len(loaded)} samples); induced p95 {format_time(self.induced_latency_s(95))}"
            )
        if self.flows is not None:
            lines.append(self.flows.describe())
        else:
            lines += [u.describe() for u in self.udp]
            lines.append(f"link: {self.link.describe()}; kernel: {kernel_words(self.kernel)}")
            if not self.udp:  # a stream's lines name the retake already
                lines += void_take_lines(self.void_takes)
        return "\n".join(lines)

    @property
    def artifacts(self):
        return list(self._artifacts)

    def plot(self, directory=None):
        """RTT over time (idle and loaded spans shaded) and the CDFs of idle and loaded RTT; returns the paths."""
        from ..analysis.plots import plot_latency

        return _plot_into(self, plot_latency, directory)


@dataclass
class RequestsResult:
    """Request/response exchanges (Pair.requests): each request's completion time beside the model's.

    records: per request its RequestTimes (started, connected, first_byte, done: monotonic seconds);
    expected_s: the model's time for each (model.request_response_times) and `why`, its inputs.
    """

    records: "list[RequestTimes]"
    request_size: int
    response_size: int
    new_connection: bool
    interval: float
    link: object
    kernel: str
    sysctls: dict
    sndbuf_requested: "int | None"
    rcvbuf_requested: "int | None"
    expected_s: list
    why: str
    server_tcp_info: list = field(default_factory=list)
    #: The server's connections' smoothed RTT (their srtt after each write, averaged) and the model's times at it:
    #: the window-per-round law alone, without the endpoints' own share of the RTT to explain.
    observed_rtt_s: "float | None" = None
    observed_expected_s: "list | None" = None
    #: When the client came to the measurement's start gate and went through it (monotonic s; None: no gate).
    gated_at: "float | None" = None
    released_at: "float | None" = None
    #: As UdpResult's: the takes voided before the kept one, the path's router qdisc counters over it, whether idle
    #: CPUs were kept polling.
    void_takes: tuple = ()
    qdiscs: dict = field(default_factory=dict, repr=False)
    cpus_polled: "bool | None" = None

    @property
    def fct_s(self):
        """Each request's completion time: from its start (before connecting, on a new connection) to the last byte."""
        return [r.done - r.started for r in self.records]

    def fct_percentile(self, p=50):
        """A percentile (0..100) of the completion times."""
        return percentile(self.fct_s, p)

    @property
    def first_byte_s(self):
        """Each request's time to the response's first byte."""
        return [r.first_byte - r.started for r in self.records]

    def describe(self):
        """The exchanges, their times and the model's, the conditions."""
        fct = self.fct_s
        lines = [
            f"{len(fct)} requests of {format_size(self.request_size)} answered by "
            f"{format_size(self.response_size)}, "
            + ("a new connection each" if self.new_connection else "on one connection")
            + (f", one every {format_time(self.interval)}" if self.interval else ", back to back"),
            "FCT: "
            + ", ".join(f"p{p} {format_time(percentile(fct, p))}" for p in (0, 50, 95, 100))
            + f"; model: first {format_time(self.expected_s[0])}"
            + (f", then {format_time(self.expected_s[-1])}" if len(self.expected_s) > 1 else ""),
            f"model: {self.why}"
            + (
                f"; at the server's mean srtt ({format_time(self.observed_rtt_s)}): first "
                f"{format_time(self.observed_expected_s[0])}"
                if self.observed_expected_s
                else ""
            ),
            "per request (measured / model): "
            + ", ".join(f"{format_time(m)}/{format_time(e)}" for m, e in list(zip(fct, self.expected_s))[:8])
            + (" ..." if len(fct) > 8 else ""),
            f"link: {self.link.describe()}; server SO_SNDBUF "
            f"{format_size(self.sndbuf_requested) if self.sndbuf_requested else 'auto'}, client SO_RCVBUF "
            f"{format_size(self.rcvbuf_requested) if self.rcvbuf_requested else 'auto'}; slow start after idle "
            f"{self.sysctls.get('server', {}).get('net.ipv4.tcp_slow_start_after_idle', '?')}; "
            f"kernel {kernel_words(self.kernel)}",
        ]
        return "\n".join(lines)


@dataclass(frozen=True)
class WindowProbe:
    """The largest receive window a socket advertised for a given SO_RCVBUF, and where it was measured."""

    window_bytes: int
    rcvbuf_requested: "int | None"
    rcvbuf_effective: int
    kernel: str
    sysctls: dict
    transfer: TransferResult = field(repr=False)


def transfer_of(result):
    """The TransferResult a registered result stands for: itself, a WindowProbe's transfer, or None (another kind)."""
    if isinstance(result, WindowProbe):
        return result.transfer
    return result if isinstance(result, TransferResult) else None


def host_contentions(results):
    """The CPUs processes outside the session kept busy while each of `results` that measured a flow ran (none where
    the flow's host load was not read)."""
    return [
        cpus
        for result in results
        if (transfer := transfer_of(result)) is not None and (cpus := transfer.host_contention_cpus) is not None
    ]


def stolen_from(results):
    """The steal (CPUs, counted low) beside which each of `results` that measured a flow ran, where it voids a
    verdict (TransferResult.beside_steal); empty: none did."""
    return [
        transfer.host_steal_surely_cpus
        for result in results
        if (transfer := transfer_of(result)) is not None and transfer.beside_steal
    ]


def with_take(results, *, void_takes=(), qdiscs=None, cpus_polled=None):
    """A workload's own results (Workload.results()) each carrying what its measurement's kept take shares: the takes
    voided before it, the path's router qdisc counters over it, whether idle CPUs were kept polling. A stream a
    LatencyResult holds stays the same object as the one listed beside it; other kinds pass through unchanged (the
    lab's register() judges them)."""
    take = dict(void_takes=tuple(void_takes), qdiscs=dict(qdiscs or {}), cpus_polled=cpus_polled)
    replaced = {}

    def carried(result):
        if id(result) not in replaced:
            if isinstance(result, (UdpResult, RequestsResult)):
                replaced[id(result)] = dataclasses.replace(result, **take)
            elif isinstance(result, LatencyResult):
                flows = result.flows
                if flows is not None:
                    flows = dataclasses.replace(flows, udp=[carried(u) for u in flows.udp])
                replaced[id(result)] = dataclasses.replace(
                    result, flows=flows, udp=[carried(u) for u in result.udp], **take
                )
            else:
                replaced[id(result)] = result
        return replaced[id(result)]

    return [carried(result) for result in results]


class WorkloadRun(NamedTuple):
    """What one workload run on a pair gave: its connections' TransferResults and its own results (UdpResults, a
    RequestsResult, a LatencyResult), every one registered with the lab."""

    flows: list
    results: list


#: The result kinds a lab registers, and so the kinds the session table, the results file and the failure artifacts
#: report (a workload's own results must be of these; its own figures go in its FlowOutcomes' details, kept on each
#: TransferResult). A WindowProbe stands for the transfer it ran.
REGISTERED_KINDS = (TransferResult, WindowProbe, UdpResult, RequestsResult, LatencyResult)
