"""One flow's result (TransferResult) and its phases across a changing link: what it measured and why."""

import dataclasses
import functools
from dataclasses import dataclass, field

from .. import guest
from ..hostload import CONTENTION_WARNING_CORES
from ..model import Host, Link, format_rate, format_size, format_time
from ..model.app import Pace, RateLimit
from ..model.predict import PAYLOAD_PER_FRAME, PAYLOAD_PER_FRAME_IPV6, Conditions, shaper_burst_bytes
from ..model.shares import Share
from ..model.validation import check_number
from ..records import SERIES_FIELDS, ConnectionEnd

#: How late a software-emulated guest's (TCG's) timers may fire a netem delay: +1.61 ms at 10 ms and +0.92 ms at
#: 50 ms on a quiet 2-core host (docs/vm.md, fidelity table); UML and the host: within 0.33 ms.
EMULATED_TIMER_SLACK_S = 2e-3

__all__ = ["TransferResult", "Phase", "KEY_COUNTERS", "EMULATED_TIMER_SLACK_S", "kernel_words"]

_TC_H_ROOT = 0xFFFFFFFF
#: What a sender's samples say it had written, with notsent_bytes (sent at least once, less resends).
_WRITTEN_FIELDS = ("bytes_sent", "bytes_retrans")


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
class TransferResult:
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
    artifact_dir: "str | None" = field(default=None, repr=False)
    offloads: dict = field(default_factory=dict, repr=False)
    qdiscs: dict = field(default_factory=dict, repr=False)
    interfaces: dict = field(default_factory=dict, repr=False)
    tcp_counters: dict = field(default_factory=dict, repr=False)
    #: The application's own bound, as its test declared it (observe(app_window=...)): bytes it keeps
    #: outstanding per application round trip, e.g. a stop-and-wait protocol's chunk.
    app_window_bytes: "int | None" = None
    #: A changing link (Schedule): the steps applied while the flow ran (measure.changes.LinkChanges) and the
    #: monotonic time of the schedule's t=0.
    link_changes: list = field(default_factory=list, repr=False)
    schedule_origin: "float | None" = field(default=None, repr=False)
    #: In a --tcpnet-vm guest: how many host CPUs processes other than the VM kept busy while the flow was
    #: measured (the runner's answer; None elsewhere). An emulated guest's links and endpoints slow down beside them.
    host_contention_cpus: "float | None" = None
    #: {ifname: (direction, OneWay)}: what each shaped router interface on the path was asked to do (qdiscs has
    #: what it did), for applied_impairments().
    shaped_ways: dict = field(default_factory=dict, repr=False)
    #: The lab's htb burst in seconds of its rate (netlink.shaper_burst_s: 1 ms on the host, 4 ms under UML): what a
    #: shaped way sends at once after an idle spell, which a stop-and-wait window's rounds skip (None: unknown).
    shaper_burst_s: "float | None" = None
    #: Its share of a bottleneck it crossed beside other flows (model.shares.Share; None: it ran alone), which the
    #: model predicts instead of the whole link: set by whoever ran them together (Pair.concurrent, a dumbbell's).
    share: "Share | None" = None
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
        """The model's time for one exchange on this path: a round trip, then the response in slow-start rounds from
        the initial window at the link's payload rate (model.request_response_times; no receive-window bound)."""
        from ..model import PAYLOAD_PER_FRAME, link_goodput, request_response_times

        rate = self.link.toward_client.rate_bps
        (seconds,) = request_response_times(
            1,
            max(1, exchange.response_bytes),
            rtt_s=self.link.rtt_s,
            window_bytes=max(1, exchange.response_bytes),
            rate_bps=link_goodput(rate) if rate else None,
            mss_bytes=PAYLOAD_PER_FRAME,
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
        """Packets the router's qdiscs dropped (loss the spec asked for plus queue overflow).

        Only root qdiscs count: an htb root already includes its leaf's drops.
        """
        return sum(q["drops"] for stats in self.qdiscs.values() for q in stats if q["parent"] == _TC_H_ROOT)

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
    def applied_impairments(self):
        """[AppliedLoss] per shaped interface asked to lose packets: what the traffic met against what was asked."""
        from ..analysis.impairments import applied_losses

        return applied_losses(self.qdiscs, self.shaped_ways)

    @property
    def applied_delay(self):
        """The round trip's floor the flow met (its sender's min_rtt) against the Link's delays (AppliedDelay), or
        None where it says nothing (no delay asked, a changing link, no sender TCP_INFO). Beside other traffic on its
        shapers only a floor too low is judged: their packets may hold the queue all along."""
        from ..analysis.impairments import applied_delay

        try:
            floor = self.min_rtt_s
        except (KeyError, TypeError, AttributeError):  # a result without the sender's TCP_INFO
            return None
        link = self._link_as_met()
        slack = EMULATED_TIMER_SLACK_S if guest.software_emulated() else 0.0
        return applied_delay(
            link, floor, download=self.direction == "download", slack_s=slack, others_packets=self._others_packets
        )

    @property
    def applied_duplicate(self):
        """The duplicates of this flow's data segments its receiver saw (D-SACKs) against the Link's duplicate rate on
        the data's way (AppliedDuplicate), or None where it says nothing (none asked, a changing link, no TCP_INFO)."""
        from ..analysis.impairments import applied_duplicate

        return self._on_data_way(applied_duplicate)

    @property
    def applied_reorder(self):
        """Whether the sender saw its data reordered (TCP_INFO reord_seen) on a way asked to reorder
        (AppliedReorder), or None where it says nothing (none asked, no delay to overtake, a changing link)."""
        from ..analysis.impairments import applied_reorder

        return self._on_data_way(applied_reorder)

    def _on_data_way(self, check):
        """check(the Link's way the data took, the sender's TCP_INFO), or None without a link or TCP_INFO."""
        link = self._link_as_met()
        if link is None:
            return None
        way = link.toward_client if self.direction == "download" else link.toward_server
        try:
            return check(way, self.sender_tcp_info)
        except (KeyError, TypeError, AttributeError):  # a result without the sender's TCP_INFO
            return None

    def _link_as_met(self):
        """The Link as this connection's packets met it: a link scoped to some ports as its ports see it (None:
        no link, or a scoped one and no ports to tell)."""
        link = self.link
        if link is not None and link.ports:
            ports = [end[1] for end in (self.sender.local, self.sender.remote) if end]
            if not ports:
                return None
            link = link.seen_by(*ports)
        return link

    @functools.cached_property
    def _others_packets(self):
        """Packets of other traffic the path's shapers carried beside this connection's own (0: the path was its
        own; analysis.impairments.others_packets)."""
        from ..analysis.impairments import others_packets

        sent, acked = self.sender_tcp_info.get("segs_out"), self.receiver_tcp_info.get("segs_out")
        own = {"toward_client": sent, "toward_server": acked}
        if self.direction != "download":
            own = {"toward_server": sent, "toward_client": acked}
        return others_packets(self.qdiscs, self.shaped_ways, {way: n for way, n in own.items() if n is not None})

    @property
    def applied_rate(self):
        """The payload rate the flow's ACKs came back at while its queue stood, against the Link's (AppliedRate), or
        None where that says nothing (no rate, an AQM or policer, loss, other traffic, too little standing queue)."""
        from ..analysis.impairments import RateSample, applied_rate

        if self.link is None or self.link.ports or self.samples is None:
            return None
        names = ("bytes_acked", "unacked", "snd_mss", "min_rtt", "busy_time", "rwnd_limited", "total_retrans")
        columns = [dict(self.series(name)) for name in (*names, "ca_state", "snd_wnd")]
        acked, unacked, mss, floor, busy, held, retrans, ca_state, window = columns
        times = sorted(set.intersection(*(set(column) for column in columns)))
        samples = [
            RateSample(
                t,
                acked[t],
                unacked[t] * mss[t],
                floor[t] / 1e6,
                # busy_time counts the time the receiver's window held the sender too (rwnd_limited): not sending.
                (busy[t] - held[t]) / 1e6,
                retrans[t],
                ca_state[t],
                window[t],
            )
            for t in times
        ]
        return applied_rate(
            self.link,
            samples,
            download=self.direction == "download",
            mss_bytes=self._mss_bytes,
            others_packets=self._others_packets,
        )

    @property
    def impairment_mismatches(self):
        """The applied impairments (loss per interface, the round trip's delay) that are not what the Link asked
        for, beyond chance ([] when all are)."""
        found = [applied for applied in self.applied_impairments if not applied.as_configured]
        found += [one for one in self._path_checks if not one.as_configured]
        return found

    @functools.cached_property
    def _path_checks(self):
        """The checks of the whole path beside the per-interface losses: delay, rate, duplicates, reordering (those
        that say something)."""
        checks = (self.applied_delay, self.applied_rate, self.applied_duplicate, self.applied_reorder)
        return [one for one in checks if one is not None]

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

    # -- what the model predicts it from --------------------------------------------------------------

    def model_conditions(self, *, observed: bool = False, link: "Link | None" = None) -> Conditions:
        """The conditions the flow ran under, as the model takes them (model.Conditions): the link of its data
        direction (`link`: another, e.g. a phase's), the kernel, both hosts' sysctls, the socket options, the cc.

        The RTT is the link's (or the measured min_rtt when larger: the stack adds some); observed=True takes the
        receive window and the RTT the flow saw (the sender's final TCP_INFO snd_wnd and its sampled srtt) instead
        of predicting them, to test the window / RTT law alone (C1).
        """
        download = self.direction == "download"
        ports = [end[1] for end in (self.sender.local, self.sender.remote) if end]
        link = link or self.link
        link = link.seen_by(*ports) if ports else link  # a link scoped to other ports: unimpaired for this flow
        way = link.toward_client if download else link.toward_server
        sender_role, receiver_role = ("server", "client") if download else ("client", "server")
        rtt = max(link.rtt_s, self.min_rtt_s or 0.0)
        window = None
        if observed:
            window = self.sender_tcp_info.get("snd_wnd") or None
            rtt = max(rtt, self._sampled_srtt_s() or self.rtt_s or 0.0)
        paced = [(p.rate_bps, p.by) for p in (self.writer, self.reader) if isinstance(p, (Pace, RateLimit))]
        return Conditions(
            kernel=self.kernel,
            rtt_s=rtt,
            rate_bps=way.rate_bps,
            loss=self._loss_met(way, download),
            queue_packets=way.queue_limit_packets() if way.rate_bps else None,
            queue=way.queue if way.rate_bps else None,
            app_rate_bps=min(paced)[0] if paced else None,
            app_rate_by=min(paced)[1] if paced else "paced",
            share_bps=self.share.bps if self.share is not None else None,
            share_why=self.share.why if self.share is not None else "",
            app_window_bytes=self.app_window_bytes,
            burst_bytes=shaper_burst_bytes(way.rate_bps, self.shaper_burst_s)
            if way.rate_bps and self.shaper_burst_s
            else None,
            cc=self.cc or self.sysctls.get(sender_role, {}).get("net.ipv4.tcp_congestion_control"),
            so_sndbuf=self.sndbuf_requested,
            so_rcvbuf=self.rcvbuf_requested,
            sender_sysctls=dict(self.sysctls.get(sender_role, {})),
            receiver_sysctls=dict(self.sysctls.get(receiver_role, {})),
            window_bytes=window,
            nbytes=self.nbytes,
            mss_bytes=self._mss_bytes,
            write_chunk_bytes=self.write_size or 1 << 20,
        )

    @property
    def _mss_bytes(self):
        """Payload bytes per full segment on its path: 1448 over IPv4 with timestamps, 1428 over IPv6."""
        return PAYLOAD_PER_FRAME_IPV6 if ":" in str((self.sender.local or ("",))[0]) else PAYLOAD_PER_FRAME

    def model_phases(self, *, observed: bool = False, steady: bool = False) -> "list[tuple[Phase, Conditions]]":
        """[(phase, conditions)] across a changing link (empty for one that never changes): each phase with the link
        then in force; the transfer size (slow start) counted in the first phase only, in none with steady=True."""
        pairs = []
        for phase in self.phases:
            conditions = self.model_conditions(observed=observed, link=phase.link)
            if phase.number or steady:
                conditions = dataclasses.replace(conditions, nbytes=None)
            pairs.append((phase, conditions))
        return pairs

    def _sampled_srtt_s(self):
        """The sender's smoothed RTT over the transfer (median of its samples), or None without 3 samples: the RTT
        the flow saw, where the final srtt can carry the last round's tail-loss probes (docs/model.md)."""
        try:
            values = sorted(v for _, v in self.series("rtt", side="sender") if v)
        except (ValueError, TypeError):  # no samples, or no first byte to time them from
            return None
        return values[len(values) // 2] / 1e6 if len(values) >= 3 else None

    def _loss_met(self, way, download):
        """The loss the flow's data met: what netem really drops for the spec (a correlated loss is not what was
        asked), or, where the run's counters show the link applied something else beyond chance, what it applied."""
        data_way = "toward_client" if download else "toward_server"
        applied = [a for a in self.applied_impairments if a.direction == data_way]
        if any(not a.as_configured for a in applied):
            kept = 1.0
            for a in applied:
                kept *= 1 - a.applied
            return 1 - kept
        return way.effective_loss

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
            owed = format_rate(self.share.bps) if self.share.bps is not None else "not predicted"
            lines.append(f"share: {owed}: {self.share.why}")
        counters = self.key_counters()
        if counters:
            lines.append("kernel counters during the measurement: " + counters)
        lines += [f"stall: {stall.describe()}" for stall in self.stalls]
        if self.capture is not None:
            lines.append(f"capture: {self.capture.pcap}")
        if self.host_contention_cpus is not None and self.host_contention_cpus >= CONTENTION_WARNING_CORES:
            lines.append(
                f"host: other processes kept {self.host_contention_cpus:.1f} CPUs busy while this flow ran; "
                f"the path's links and endpoints (a guest's whole kernel) run only when they get a CPU, so its "
                f"rates and timings may be the busy host's rather than the path's: judge them again on a quiet host"
            )
        lines += [phase.describe() for phase in self.phases]
        return "\n".join(lines)


@dataclass(frozen=True)
class Phase:
    """One step of a changing link as a flow lived it; times in seconds on the schedule's clock (t=0 when the
    measurement started), the start when the kernel acknowledged the step."""

    number: int
    scheduled_at: float
    start_s: float
    end_s: float
    link: Link
    goodput_bps: float
    rtt_s: "float | None"
    retransmits: "int | None"

    def describe(self):
        return (
            f"phase {self.number} ({format_time(self.start_s)}-{format_time(self.end_s)}, scheduled at "
            f"{format_time(self.scheduled_at)}): {format_rate(self.goodput_bps)}"
            + (f", srtt {format_time(self.rtt_s)}" if self.rtt_s is not None else "")
            + (f", {self.retransmits} retransmitted" if self.retransmits is not None else "")
            + f"; link {self.link.describe()}"
        )


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
