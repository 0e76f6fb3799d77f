"""The conditions a flow ran under as the model takes them (model.Conditions), built from a TransferResult's typed
fields: the one route from a result into the model (model.Predictable); and the phases of a changing link it lived."""

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..model import Link, format_rate, format_time
from ..model.app import Pace, RateLimit
from ..model.predict import PAYLOAD_PER_FRAME, PAYLOAD_PER_FRAME_IPV6, Conditions, HostLimit, shaper_burst_bytes
from ..model.shares import Share
from ..records import ConnectionEnd

__all__ = ["ModelInputs", "Phase"]


class ModelInputs:
    """TransferResult's conditions for the model, whole or per phase of a changing link (a mixin)."""

    if TYPE_CHECKING:  # what it reads of the TransferResult it is mixed into (no attributes of its own)
        nbytes: int
        direction: str
        kernel: str
        sender: ConnectionEnd
        link: Link
        sysctls: dict
        cc: str | None
        sndbuf_requested: int | None
        rcvbuf_requested: int | None
        write_size: int | None
        writer: object
        reader: object
        app_window_bytes: int | None
        shaper_burst_s: float | None
        share: Share | None
        host_limit: HostLimit | None
        min_rtt_s: float | None
        rtt_s: float | None
        sender_tcp_info: dict
        phases: "list[Phase]"

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
            host_bps=self.host_limit.bps if self.host_limit is not None else None,
            host_why=self.host_limit.describe() if self.host_limit is not None else "",
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
