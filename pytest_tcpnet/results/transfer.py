"""One flow's result (TransferResult) and its phases across a changing link: what it measured and why."""

import functools
import os
from dataclasses import dataclass, field

from .. import guest
from ..hostload import CONTENTION_WARNING_CORES, STEAL_VOID_CPUS, STEAL_WARNING_CPUS
from ..model import Host, HostLimit, Link, format_rate, format_size, format_time
from ..model.shares import Share
from ..model.validation import check_number
from ..records import SERIES_FIELDS, ConnectionEnd
from .applied import EMULATED_TIMER_SLACK_S, AppliedChecks
from .conditions import ModelInputs, Phase

__all__ = ["TransferResult", "VoidTake", "Phase", "KEY_COUNTERS", "EMULATED_TIMER_SLACK_S", "kernel_words"]

_TC_H_ROOT = 0xFFFFFFFF
#: What a sender's samples say it had written, with notsent_bytes (sent at least once, less resends).
_WRITTEN_FIELDS = ("bytes_sent", "bytes_retrans")


@dataclass(frozen=True)
class VoidTake:
    """A take of a measurement that was void and taken again (measure.run): the hypervisor stole at least
    hostload.STEAL_VOID_CPUS while it ran, so its links ran slower than asked."""

    #: The steal while it ran, counted low (hostload.surely_stolen_cpus), in average CPUs.
    steal_cpus: float
    #: How long the take ran, and how long the next one waited for the steal to calm (hostload.wait_for_steal_below).
    seconds: float
    waited_s: float

    def describe(self):
        """One line: the steal, the take's span and the wait."""
        return (
            f"{self.steal_cpus:.2f} CPUs stolen over {self.seconds:.1f} s; the next take waited {self.waited_s:.1f} s"
        )


def void_take_lines(void_takes):
    """describe()'s line naming the takes a measurement voided before this one, if any."""
    if not void_takes:
        return []
    return [
        f"retaken: {len(void_takes)} earlier take(s) void beside hypervisor steal (--tcpnet-steal-retakes): "
        + "; ".join(take.describe() for take in void_takes)
    ]


def router_drops(qdiscs):
    """Packets the router's qdiscs dropped over a measurement ({ifname: [qdisc stats deltas]}): loss the spec asked
    for plus queue overflow. Only root qdiscs count: an htb root already includes its leaf's drops."""
    return sum(q["drops"] for stats in qdiscs.values() for q in stats if q["parent"] == _TC_H_ROOT)


def is_busy_host(contention_cpus):
    """Whether a reading of other processes' load (CPUs; None: not read) names a busy host: half a CPU or more."""
    return contention_cpus is not None and contention_cpus >= CONTENTION_WARNING_CORES


def busy_host_lines(contentions, what):
    """The describe() line naming a busy host: the most CPUs other processes kept busy while `what` ran, from half
    a CPU on (is_busy_host); else none."""
    busy = [cpus for cpus in contentions if is_busy_host(cpus)]
    if not busy:
        return []
    return [
        f"host: other processes kept {max(busy):.1f} CPUs busy while {what} ran; the path's links and endpoints (a "
        "guest's whole kernel) run only when they get a CPU, so its rates and timings may be the busy host's rather "
        "than the path's: judge them again on a quiet host"
    ]


def machine_lines(steal, siblings, polled=None):
    """describe()'s line naming the hypervisor's steal and the session's other workers' load while a flow ran (from
    STEAL_WARNING_CPUS and CONTENTION_WARNING_CORES on); else none. polled False: the idle CPUs halted meanwhile, and
    part of that steal was their wake-ups (hostload.idle_cpus_polling)."""
    words = []
    if steal is not None and steal >= STEAL_WARNING_CPUS:
        words.append(
            f"the hypervisor stole {steal:.2f} CPUs (a VM host's shaped links stall meanwhile"
            + (
                "; its idle CPUs were not kept polling, so waking them counted too: run as root without "
                "--tcpnet-idle-poll=off)"
                if polled is False
                else ")"
            )
        )
    if siblings is not None and siblings >= CONTENTION_WARNING_CORES:
        words.append(f"this session's other workers kept {siblings:.1f} CPUs busy")
    return [f"machine: while this flow ran {' and '.join(words)}"] if words else []


def kernel_words(kernel):
    """The kernel a result ran under, and in which guest where it was not the host ("6.1.176 (User-Mode Linux guest)")."""
    return f"{kernel} ({guest.conditions()})" if guest.conditions() else f"{kernel}"


#: TcpExt counters that name why a flow waited or resent (describe() shows the non-zero ones): a delayed ACK (the
#: receiver held its ACK for the delack timer: with Nagle on the sender, a request's second write waits for it),
#: a retransmission timeout, a tail-loss probe, spurious recoveries, a window the receiver closed or shrank.
KEY_COUNTERS = (
    "DelayedACKs",
    "DelayedACKLost",
    "TCPTimeouts",
    "TCPLossProbes",
    "TCPSpuriousRTOs",
    "TCPSlowStartRetrans",
    "TCPFastRetrans",
    "TCPDSACKRecv",
    "TCPToZeroWindowAdv",
    "TCPFromZeroWindowAdv",
    "TCPWantZeroWindowAdv",
    "TCPAutoCorking",
)


@dataclass(frozen=True, eq=False)
class TransferResult(AppliedChecks, ModelInputs):
    """One flow: goodput as the receiving application saw it, plus everything needed to explain it.

    Times in series are seconds from the receiver's first data byte.
    """

    nbytes: int
    direction: str
    kernel: str
    link: Link
    client: Host
    server: Host
    sysctls: dict
    sndbuf_requested: "int | None" = None
    rcvbuf_requested: "int | None" = None
    #: Each end as recorded (records.ConnectionEnd; a workload's dict record is turned into one).
    sender: ConnectionEnd = field(default_factory=ConnectionEnd, repr=False)
    receiver: ConnectionEnd = field(default_factory=ConnectionEnd, repr=False)
    sender_role: str = "server"
    workload: str = "bulk"
    reader: object = None
    writer: object = None
    write_size: "int | None" = None
    starved_receiver: bool = False
    reported_bps: "float | None" = None
    details: dict = field(default_factory=dict, repr=False)
    samples: object = field(default=None, repr=False)
    capture: object = field(default=None, repr=False)
    artifact_dir: "os.PathLike | str | None" = field(default=None, repr=False)
    offloads: dict = field(default_factory=dict, repr=False)
    qdiscs: dict = field(default_factory=dict, repr=False)
    #: {ifname: the most per-flow queues its fq_codel served at once while the flow was measured} of the path's
    #: fq_codel interfaces (measure.flow_queues): fewer than the flows that queued there means some shared one.
    flow_queues: dict = field(default_factory=dict, repr=False)
    interfaces: dict = field(default_factory=dict, repr=False)
    tcp_counters: dict = field(default_factory=dict, repr=False)
    #: The application's own bound, as its test declared it (observe(app_window=...)): bytes it keeps
    #: outstanding per application round trip, e.g. a stop-and-wait protocol's chunk.
    app_window_bytes: "int | None" = None
    #: A changing link (Schedule): the steps applied while the flow ran (measure.changes.LinkChanges) and the
    #: monotonic time of the schedule's t=0.
    link_changes: list = field(default_factory=list, repr=False)
    schedule_origin: "float | None" = field(default=None, repr=False)
    #: How many host CPUs processes outside the session kept busy while the flow was measured (in a --tcpnet-vm
    #: guest, processes other than the VM: the runner's answer; None: not read). Links and endpoints slow beside them.
    host_contention_cpus: "float | None" = None
    #: How many CPUs the host's hypervisor stole while the flow was measured (/proc/stat's steal: a VM host's shaped
    #: links, and its guests, stall meanwhile; in a guest the runner's reading), and on the host how many the
    #: session's other xdist workers kept busy (not "others": their measurements wait for a slot, their other work
    #: does not; None in a guest, whose runner's snapshot, hostload.cpu_snapshot, has no worker tree).
    host_steal_cpus: "float | None" = None
    #: The same steal counted low (hostload.surely_stolen_cpus: one clock tick less), which voids a measurement from
    #: hostload.STEAL_VOID_CPUS on (beside_steal).
    host_steal_surely_cpus: "float | None" = None
    sibling_cpus: "float | None" = None
    #: Whether the machine's idle CPUs were kept polling, not halted, while it was measured (hostload.
    #: idle_cpus_polling: a halted vCPU's wake-up is steal; False: not allowed, a rootless session, or
    #: --tcpnet-idle-poll=off; None: unknown, or a guest's, whose runner holds the host's request for the session).
    cpus_polled: "bool | None" = None
    #: The takes of this measurement voided before it, each beside hypervisor steal (VoidTake; empty: none).
    void_takes: tuple = ()
    #: {ifname: (direction, OneWay)}: what each shaped router interface on the path was asked to do (qdiscs has
    #: what it did), for applied_impairments().
    shaped_ways: dict = field(default_factory=dict, repr=False)
    #: The lab's htb burst in seconds of its rate (netlink.shaper_burst_s: 4 ms on the host and under UML): what a
    #: shaped way sends at once after an idle spell, which a stop-and-wait window's rounds skip (None: unknown).
    shaper_burst_s: "float | None" = None
    #: Its share of a bottleneck it crossed beside other flows (model.shares.Share; None: it ran alone), which the
    #: model predicts instead of the whole link: set by whoever ran them together (Pair.concurrent, a dumbbell's).
    share: "Share | None" = None
    #: What one unshaped flow carried on this host when the session calibrated it (model.HostLimit; None: not
    #: calibrated): the model's "host" bound, which binds where no link is slower.
    host_limit: "HostLimit | None" = None
    #: An observed connection's payload bytes each end sent ({"client": n, "server": n}); empty for the built-in
    #: one-way workloads, whose other direction carries none.
    sent_bytes: dict = field(default_factory=dict)
    #: An observed connection's capture at each end ({"client": ..., "server": ...}, its packets only); `capture` is
    #: the sending end's.
    captures: dict = field(default_factory=dict, repr=False)
    _artifacts: list = field(default_factory=list, repr=False)

    def __post_init__(self):
        # The one place a workload's record (a dict from its process) becomes a typed end.
        object.__setattr__(self, "sender", ConnectionEnd.from_record(self.sender))
        object.__setattr__(self, "receiver", ConnectionEnd.from_record(self.receiver))

    # -- the machine it ran on -------------------------------------------------------------------

    @property
    def beside_busy_host(self):
        """Whether processes outside the session kept hostload.CONTENTION_WARNING_CORES or more busy while it was
        measured: its rates and timings may be the busy host's (describe() says so: busy_host_lines)."""
        return is_busy_host(self.host_contention_cpus)

    @property
    def beside_steal(self):
        """Whether the hypervisor stole hostload.STEAL_VOID_CPUS or more (counted low) while it was measured: its links
        ran slower than asked, so a failed verdict on it is void (the plugin runs the test again:
        --tcpnet-steal-reruns)."""
        return self.host_steal_surely_cpus is not None and self.host_steal_surely_cpus >= STEAL_VOID_CPUS

    # -- bytes each way ---------------------------------------------------------------------------

    @property
    def upload_bytes(self):
        """Payload bytes client -> server."""
        if "client" in self.sent_bytes:
            return self.sent_bytes["client"]
        return self.nbytes if self.direction == "upload" else 0

    @property
    def download_bytes(self):
        """Payload bytes server -> client."""
        if "server" in self.sent_bytes:
            return self.sent_bytes["server"]
        return self.nbytes if self.direction == "download" else 0

    # -- the connection's life ---------------------------------------------------------------------

    @property
    def opened_at(self):
        """Monotonic time the client sent the connection's first SYN, as its kernel stamped it; None where it was not
        watched (a built-in workload's flow, or a connection opened before observe())."""
        return self._client_end().syn_at

    @property
    def closed_at(self):
        """Monotonic time of the connection's last FIN or RST at the client, as its kernel stamped it; None where
        not watched (as opened_at), or still open when the observation ended."""
        return self._client_end().fin_at

    @property
    def lifetime_s(self):
        """Seconds from the connection's first SYN to its last FIN or RST at the client (exact to the kernel's
        stamps, whatever the sampling interval); None unless both were watched."""
        if self.opened_at is None or self.closed_at is None:
            return None
        return self.closed_at - self.opened_at

    def _client_end(self):
        return self.sender if self.sender_role == "client" else self.receiver

    @functools.cached_property
    def stalls(self):
        """Where the connection waited on a timer or its receiver, not on the path (analysis/stalls.py): delayed_ack,
        rto, zero_window from the capture (capture=True; without one, a timeout from the counters), receiver_limited
        from the sender's TCP_INFO; each with its count, lengths and evidence."""
        from ..analysis.stalls import find_stalls

        packets = self.capture.packets if self.capture is not None else None
        try:
            sender_info = self.sender_tcp_info
        except (KeyError, TypeError):  # a result without the sender's TCP_INFO
            sender_info = {}
        return find_stalls(packets, self.tcp_counters, sender_info)

    @functools.cached_property
    def exchanges(self):
        """The connection's request/response exchanges (analysis/exchanges.py: start, end, bytes each way, latency),
        from its capture at the client (what the client waited), else the one it has; ValueError without one."""
        from ..analysis.exchanges import find_exchanges
        from ..capture.decode import endpoint_text

        capture = self.captures.get("client") or self.capture
        if capture is None:
            raise ValueError(
                "exchanges come from the connection's packets: measure it with a capture (observe(capture=True))"
            )
        end = self.sender if self.sender_role == "client" else self.receiver
        if not end.local:
            raise ValueError("exchanges need the connection's addresses: an observed connection has them")
        return find_exchanges(capture.packets, endpoint_text(*end.local))

    def exchange_expected_s(self, exchange):
        """The model's time for one exchange on this path: the request and then the response, each in slow-start
        rounds from the initial window at its way's payload rate, and a round trip (model.request_response_times; no
        receive-window bound). A large request (an upload acknowledged by the application) takes its own time."""
        from ..model import PAYLOAD_PER_FRAME, link_goodput, request_response_times

        answer_rate, ask_rate = self.link.toward_client.rate_bps, self.link.toward_server.rate_bps
        (seconds,) = request_response_times(
            1,
            max(1, exchange.response_bytes),
            rtt_s=self.link.rtt_s,
            window_bytes=max(1, exchange.response_bytes, exchange.request_bytes),
            rate_bps=link_goodput(answer_rate) if answer_rate else None,
            mss_bytes=PAYLOAD_PER_FRAME,
            request_bytes=max(1, exchange.request_bytes),
            request_rate_bps=link_goodput(ask_rate) if ask_rate else None,
        )
        return seconds

    @property
    def between_samples(self):
        """True for an observed connection that opened and closed between two samples: seen from its close (its
        final TCP_INFO), so its bytes are exact but its duration is bounded by the sampling interval."""
        return self.receiver.between_samples

    # -- goodput ---------------------------------------------------------------------------------

    @property
    def first_byte_at(self):
        """Monotonic time of the receiver's first data byte (or of the connection, if none came)."""
        return self.receiver.first_byte_at or self.receiver.connected_at

    @property
    def duration_s(self):
        """Seconds from the receiver's first data byte to its last (handshake excluded)."""
        return (self.receiver.last_byte_at or 0.0) - self.first_byte_at

    @property
    def throughput_bps(self):
        """Goodput in bit/s: the bytes after the receiver's first read, over the time from that read to the last byte.

        Neither the handshake nor the first segment's trip counts; a tool's own figure (iperf3,
        curl) is used where the workload reports one. A transfer that arrived in one read is
        timed from the connection instead.
        """
        if self.reported_bps is not None:
            return self.reported_bps
        after_first = self.nbytes - (self.receiver.first_read or 0)
        if self.duration_s > 1e-6 and after_first > 0:
            return after_first * 8 / self.duration_s
        return self.nbytes * 8 / max(1e-6, (self.receiver.last_byte_at or 0.0) - self.receiver.connected_at)

    @property
    def active_throughput_bps(self):
        """Bytes over the time the sender had data in flight or queued (TCP_INFO busy_time): idle gaps excluded (C16)."""
        busy_us = self.sender_tcp_info.get("busy_time")
        if not busy_us:
            return None
        return self.nbytes * 8 / (busy_us / 1e6)

    def rate_series(self, interval=0.1, *, source="application"):
        """[(t_s, bit/s)] per `interval` seconds (at each interval's end).

        source="application": bytes the receiving application read (its own clock, or the
        sampled socket for tools like curl); source="socket": bytes the receiver's kernel
        took in (sampled tcpi_bytes_received), what a capture on the wire shows.
        """
        _check_interval(interval)
        if source not in ("application", "socket"):
            raise ValueError(f"source: must be 'application' or 'socket', got {source!r}")
        points = self._cumulative_bytes() if source == "application" else self._socket_bytes()
        if len(points) < 2:
            return []
        start, end = points[0][0], points[-1][0]
        series, t = [], start
        while t < end - 1e-9:
            upper = min(t + interval, end)
            moved = _bytes_at(points, upper) - _bytes_at(points, t)
            series.append((upper - start, moved * 8 / (upper - t)))
            t = upper
        return series

    def unread_series(self):
        """[(t_s, bytes)] the receiver's kernel had taken in and its application not yet read, at each socket sample.

        How far the wire ran ahead of the reader: at most what the receive buffer holds. Empty
        where the receiving program kept no clock of its own (curl, a user's program): its
        reads are then known only from the socket.
        """
        checkpoints = [tuple(p) for p in self.receiver.checkpoints or ()]
        if len(checkpoints) < 2:
            return []
        origin = self.first_byte_at
        return [(t - origin, taken - _bytes_at(checkpoints, t)) for t, taken in self._socket_bytes()]

    def ewma_series(self, interval=0.1, alpha=0.3, *, source="application"):
        """The rate series smoothed as download tools show it: each point alpha * sample + (1 - alpha) * previous."""
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha: must be in (0, 1], got {alpha!r}")
        smoothed, value = [], None
        for t, bps in self.rate_series(interval, source=source):
            value = bps if value is None else alpha * bps + (1 - alpha) * value
            smoothed.append((t, value))
        return smoothed

    def _cumulative_bytes(self):
        """[(monotonic t, bytes received so far)], from the receiver's own checkpoints or the sampled socket."""
        checkpoints = self.receiver.checkpoints
        if checkpoints:
            return [tuple(p) for p in checkpoints]
        return self._socket_bytes()

    def _socket_bytes(self):
        """[(monotonic t, bytes the receiver's socket took in)], sampled from outside, from 0 at the connection."""
        sampled = [(self.first_byte_at + t, v) for t, v in self.series("bytes_received", side="receiver")]
        origin = self.receiver.connected_at
        if sampled and origin is not None and origin < sampled[0][0]:
            # A burst that fills the buffer before the first sample belongs to the first interval.
            sampled.insert(0, (origin, 0))
        elif sampled and sampled[0][1] > 0:
            # The kernel took bytes in before the application's clock said it was connected (its
            # connect() returned late): they arrived since the sample before, which had no socket yet.
            sampled.insert(0, (sampled[0][0] - (self.samples.interval if self.samples else 0.0), 0))
        return sampled

    # -- TCP_INFO and socket memory ------------------------------------------------------------------

    @property
    def cc(self):
        """The congestion control the sending socket really used."""
        return self.sender.buffers.get("cc")

    @property
    def sender_tcp_info(self):
        """The sender's final TCP_INFO (after the last byte was acknowledged)."""
        return self.sender.tcp_info

    @property
    def receiver_tcp_info(self):
        """The receiver's final TCP_INFO (after the sender's FIN)."""
        return self.receiver.tcp_info

    @property
    def rtt_s(self):
        """The sender's smoothed RTT at the end of the transfer (TCP_INFO), in seconds."""
        rtt = self.sender_tcp_info.get("rtt")
        return None if rtt is None else rtt / 1e6

    @property
    def min_rtt_s(self):
        """The lowest RTT the sender saw (TCP_INFO min_rtt): the path's base RTT plus stack time."""
        rtt = self.sender_tcp_info.get("min_rtt")
        return None if rtt is None else rtt / 1e6

    @property
    def retransmits(self):
        """Segments the sender retransmitted."""
        return self.sender_tcp_info.get("total_retrans")

    @property
    def ce_marks(self):
        """Segments acknowledged with ECE (TCP_INFO delivered_ce): the sender's view of congestion marks; 0 without
        ECN, None on a kernel that does not report it.

        Under classic ECN (RFC 3168) the receiver repeats ECE on every ACK until the sender's CWR,
        so this counts every segment those ACKs cover, not the marks: 356 for 12 codel marks in
        the VM (queue_ecn_marks and the capture's CWR events count marks); with DCTCP's per-packet
        echo it tracks the marks themselves."""
        return self.sender_tcp_info.get("delivered_ce")

    @property
    def queue_ecn_marks(self):
        """Packets the router's queues marked CE instead of dropping (their own counters; None when no queue on
        the path keeps one this plugin reads)."""
        marks = [q["ecn_marks"] for stats in self.qdiscs.values() for q in stats if q.get("ecn_marks") is not None]
        return sum(marks) if marks else None

    @property
    def effective_sndbuf(self):
        """SO_SNDBUF as the kernel made it when the connection started (C12: twice the request, capped)."""
        return (self.sender.buffers_at_connect or self.sender.buffers).get("sndbuf")

    @property
    def effective_rcvbuf(self):
        """SO_RCVBUF as the kernel made it when the connection started (C12: twice the request, capped)."""
        return (self.receiver.buffers_at_connect or self.receiver.buffers).get("rcvbuf")

    def series(self, field, side="sender"):
        """[(t_s, value)] of one sampled TCP_INFO or socket-memory field of one end (see records.SERIES_FIELDS)."""
        if side not in ("sender", "receiver"):
            raise ValueError(f"side: must be 'sender' or 'receiver', got {side!r}")
        if field not in SERIES_FIELDS:
            raise ValueError(f"field: {field!r} is not sampled; sampled fields: {', '.join(SERIES_FIELDS)}")
        if self.samples is None:
            return []
        record = self.sender if side == "sender" else self.receiver
        role = self.sender_role if side == "sender" else self.receiver_role
        if record.local is None:
            return []
        origin = self.first_byte_at
        return [(t - origin, v) for t, v in self.samples.series(role, record.local, record.remote, field)]

    def tcp_info_series(self, field, side="sender"):
        """Values of one sampled field over the transfer, without times (see series())."""
        return [value for _, value in self.series(field, side)]

    @property
    def limited_by(self):
        """What bounded the sender most: 'rwnd', 'sndbuf', 'cwnd' or 'app' (None if nothing tells).

        Read from the sender's samples within the transfer (analysis.limits: in flight against
        cwnd and the peer's window, unsent data, the send buffer); the kernel's chrono counters
        decide only when too few samples exist.
        """
        verdict = self.limited_by_shares()
        return verdict and verdict[0]

    def limited_by_shares(self):
        """(label, {label: share}, basis) behind limited_by, or None without samples or chrono counters."""
        from ..analysis.limits import limited_by

        try:
            return limited_by(self.sender_tcp_info, self.sender_active_s, self.sender_samples())
        except ValueError:
            return None  # a tool that reports no chrono counters (or a kernel before 4.10), and too few samples

    def sender_samples(self):
        """The sender's sampled rows within the transfer (first write to last ACK) as dicts, in time order."""
        from ..analysis.limits import SAMPLE_FIELDS

        columns = {field: dict(self.series(field)) for field in SAMPLE_FIELDS + _WRITTEN_FIELDS}
        start, end = self.sender.first_write_at, self.sender.acked_at
        origin = self.first_byte_at
        times = sorted(columns["unacked"])
        if start is not None and end is not None and origin is not None:
            times = [t for t in times if start - origin <= t <= end - origin]
        # Once the application has written its last byte, what is left in flight drains: that time is the end of
        # the transfer, not the application holding data back (a 200 KB bulk flow at 22 Mbit/s spent half of
        # its samples draining a send buffer of a third of it, and read "app").
        written = {
            t: (columns["bytes_sent"].get(t) or 0)
            - (columns["bytes_retrans"].get(t) or 0)
            + (columns["notsent_bytes"].get(t) or 0)
            for t in times
        }
        total = max(written.values(), default=0)
        drain = next(
            (
                t
                for t in times
                if written[t] >= total - 1
                and (columns["notsent_bytes"].get(t) or 0) < (columns["snd_mss"].get(t) or 1448)
            ),
            None,
        )
        if drain is not None:
            times = [t for t in times if t < drain]
        return [{field: columns[field].get(t) for field in SAMPLE_FIELDS} for t in times]

    @property
    def sender_active_s(self):
        """Seconds from the sender's first write to its last byte acknowledged (None if it did not say)."""
        start, end = self.sender.first_write_at, self.sender.acked_at
        return None if start is None or end is None else end - start

    @property
    def receiver_role(self):
        """'client' for a download, 'server' for an upload."""
        return "client" if self.sender_role == "server" else "server"

    def counter(self, name, side="receiver"):
        """How much one TCP MIB counter of one end's namespace grew during the run (e.g. 'TcpExt.TCPToZeroWindowAdv').

        The namespace's counters include every socket in it: with one flow per pair, that flow's.
        """
        if side not in ("sender", "receiver"):
            raise ValueError(f"side: must be 'sender' or 'receiver', got {side!r}")
        role = self.sender_role if side == "sender" else self.receiver_role
        return self.tcp_counters.get(role, {}).get(name, 0)

    @property
    def zero_windows_advertised(self):
        """Times the receiver advertised a zero window (the kernel's TcpExt.TCPToZeroWindowAdv)."""
        return self.counter("TcpExt.TCPToZeroWindowAdv")

    # -- capture and artifacts --------------------------------------------------------------------

    @property
    def events(self):
        """TCP expert-event counts from the capture (window_full, zero_window, ...), or None without one."""
        return None if self.capture is None else self.capture.events

    @property
    def artifacts(self):
        """Paths of this result's pcap and plots written so far."""
        paths = [self.capture.pcap] if self.capture is not None else []
        return paths + list(self._artifacts)

    def plot(self, directory=None):
        """Write the plots (needs matplotlib: pip install 'pytest-tcpnet[plots]'); return their paths."""
        from ..analysis.plots import plot_result

        return _plot_into(self, plot_result, directory)

    # -- router counters --------------------------------------------------------------------------

    @property
    def emulator_drops(self):
        """Packets the router's qdiscs dropped over the measurement (loss the spec asked for plus queue overflow)."""
        return router_drops(self.qdiscs)

    def key_counters(self):
        """'client DelayedACKs 200, server TCPTimeouts 1': the TCP counters that explain stalls and losses, non-zero
        ones only, per end (the namespace's whole counters over the measurement: every connection there counts)."""
        parts = []
        for role in ("client", "server"):
            counts = (self.tcp_counters or {}).get(role) or {}
            shown = [f"{name} {counts[f'TcpExt.{name}']}" for name in KEY_COUNTERS if counts.get(f"TcpExt.{name}")]
            if shown:
                parts.append(f"{role} " + ", ".join(shown))
        return "; ".join(parts)

    @property
    def interface_drops(self):
        """Packets the veths themselves dropped (e.g. a receive backlog overflow), by 'role/ifname'."""
        return {
            end: c["rx_dropped"] + c["tx_dropped"]
            for end, c in self.interfaces.items()
            if c["rx_dropped"] + c["tx_dropped"]
        }

    def goodput_between(self, start_s, end_s):
        """Goodput (bit/s) the receiving application saw between two times: seconds on the schedule's clock for a
        changing link (result.phases' clock), else since the first data byte."""
        if not 0 <= start_s < end_s:
            raise ValueError(f"start_s/end_s: need 0 <= start_s < end_s, got {start_s!r}, {end_s!r}")
        origin = self.schedule_origin if self.schedule_origin is not None else self.first_byte_at
        points = self._cumulative_bytes()
        return (_bytes_at(points, origin + end_s) - _bytes_at(points, origin + start_s)) * 8 / (end_s - start_s)

    @property
    def phases(self):
        """One Phase per step of a changing link the flow lived through (empty for a link that never changes): its
        span on the schedule's clock (from when the kernel acknowledged the change), the link in force, the
        goodput, the sender's mean sampled RTT and its retransmissions in it."""
        if not self.link.changing or self.schedule_origin is None:
            return []
        origin = self.schedule_origin
        first, last = self.first_byte_at - origin, (self.receiver.last_byte_at or self.first_byte_at) - origin
        applied = {}
        for step in self.link_changes:
            applied[step["at"]] = max(applied.get(step["at"], 0.0), step["applied_at"])
        starts = [0.0] + [applied.get(at, at) for at in self.link.change_times]
        rtts = [(t + self.first_byte_at - origin, v / 1e6) for t, v in self.series("rtt")]
        retrans = [(t + self.first_byte_at - origin, v) for t, v in self.series("total_retrans")]
        phases = []
        for number, (at, start) in enumerate(zip([0.0] + self.link.change_times, starts)):
            end = starts[number + 1] if number + 1 < len(starts) else last
            start, end = max(start, first), min(end, last)
            if end <= start:
                continue
            inside = [v for t, v in rtts if start <= t < end]
            before = [v for t, v in retrans if t < start]
            upto = [v for t, v in retrans if t < end]
            phases.append(
                Phase(
                    number=number,
                    scheduled_at=at,
                    start_s=start,
                    end_s=end,
                    link=self.link.at(at),
                    goodput_bps=self.goodput_between(start, end),
                    rtt_s=sum(inside) / len(inside) if inside else None,
                    retransmits=(upto[-1] - (before[-1] if before else 0)) if upto else None,
                )
            )
        return phases

    def describe(self):
        """The conditions, one per line, for failure reports."""
        app = [
            f"reader {self.reader.describe()}" if self.reader else "",
            f"writer {self.writer.describe()}" if self.writer else "",
            "receiver starved of CPU" if self.starved_receiver else "",
        ]
        lines = [
            f"{self.workload}: {format_size(self.nbytes)} {self.direction} in {format_time(self.duration_s)} "
            f"= {format_rate(self.throughput_bps)}",
            f"link: {self.link.describe()}",
            f"client: {self.client.describe()}; server: {self.server.describe()}",
            f"sender socket: SO_SNDBUF {self.sndbuf_requested or 'auto'} -> {self.effective_sndbuf} B, cc {self.cc}; "
            f"receiver socket: SO_RCVBUF {self.rcvbuf_requested or 'auto'} -> {self.effective_rcvbuf} B",
            f"kernel: {kernel_words(self.kernel)}",
        ]
        if any(app):
            lines.append("application: " + ", ".join(a for a in app if a))
        if self.lifetime_s is not None:
            lines.append(
                f"connection: {format_time(self.lifetime_s)} from its SYN to its last FIN or RST (the kernel's stamps)"
            )
        info = self.sender_tcp_info
        if info:
            lines.append(
                f"sender TCP_INFO: rtt {info.get('rtt', 0) / 1000:.3g} ms, cwnd {info.get('snd_cwnd')}, "
                f"retrans {info.get('total_retrans')} (dsack {info.get('dsack_dups')}), "
                f"rwnd_limited {info.get('rwnd_limited', 0) / 1000:.4g} ms, "
                f"sndbuf_limited {info.get('sndbuf_limited', 0) / 1000:.4g} ms, "
                f"busy {info.get('busy_time', 0) / 1000:.4g} ms"
            )
        if self.qdiscs:
            marks = self.queue_ecn_marks
            lines.append(
                f"router qdisc drops: {self.emulator_drops}; veth drops: {self.interface_drops or 0}"
                + ("" if marks is None else f"; queue CE marks: {marks}, sender delivered_ce: {self.ce_marks}")
            )
        lines += [f"link applied: {applied.describe()}" for applied in self.applied_impairments]
        lines += [f"link applied: {one.describe()}" for one in self._path_checks]
        if self.share is not None:
            lines.append(f"share: {self.share.describe()}: {self.share.why}")
        counters = self.key_counters()
        if counters:
            lines.append("kernel counters during the measurement: " + counters)
        lines += [f"stall: {stall.describe()}" for stall in self.stalls]
        if self.capture is not None:
            lines.append(f"capture: {self.capture.pcap}")
        lines += busy_host_lines([self.host_contention_cpus], "this flow")
        lines += machine_lines(self.host_steal_cpus, self.sibling_cpus, self.cpus_polled)
        lines += void_take_lines(self.void_takes)
        lines += [phase.describe() for phase in self.phases]
        return "\n".join(lines)


def _plot_into(result, draw, directory):
    """draw(result, directory) into directory or the result's artifact directory; the paths, kept as artifacts."""
    directory = directory or result.artifact_dir
    if directory is None:
        raise ValueError("directory: this result has no artifact directory; pass one (e.g. tmp_path)")
    paths = draw(result, directory)
    result._artifacts.extend(p for p in paths if p not in result._artifacts)
    return paths


def _check_interval(interval):
    check_number("interval", interval, 0, 3600, low_open=True, must="in (0, 3600] seconds")


def _bytes_at(points, t):
    """Cumulative bytes at time t, interpolated linearly between (time, bytes) points."""
    if t <= points[0][0]:
        return points[0][1]
    lo, hi = 0, len(points) - 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if points[mid][0] <= t:
            lo = mid
        else:
            hi = mid
    (t0, b0), (t1, b1) = points[lo], points[hi]
    if t >= t1:
        return b1
    return b0 + (b1 - b0) * (t - t0) / (t1 - t0) if t1 > t0 else b1
