"""What a flow's path applied against what its Link asked (loss, delay, rate, duplicates, reordering): the checks a
TransferResult offers, read from its router counters and its sender's TCP_INFO (analysis/impairments.py)."""

import functools

from .. import guest

#: How late a software-emulated guest's (TCG's) timers may fire a netem delay: +1.61 ms at 10 ms and +0.92 ms at
#: 50 ms on a quiet 2-core host (docs/vm.md, fidelity table); UML and the host: within 0.33 ms.
EMULATED_TIMER_SLACK_S = 2e-3

__all__ = ["AppliedChecks", "EMULATED_TIMER_SLACK_S"]


class AppliedChecks:
    """TransferResult's checks of what its path applied (a mixin: it reads the result's fields)."""

    @functools.cached_property
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
        from ..analysis.impairments import SHARED_SHARE

        return self._count_others(share=SHARED_SHARE)

    def _count_others(self, *, share):
        """others_packets for this connection's own segments, counted from share of them on."""
        from ..analysis.impairments import others_packets

        sent, acked = self.sender_tcp_info.get("segs_out"), self.receiver_tcp_info.get("segs_out")
        own = {"toward_client": sent, "toward_server": acked}
        if self.direction != "download":
            own = {"toward_server": sent, "toward_client": acked}
        return others_packets(
            self.qdiscs, self.shaped_ways, {way: n for way, n in own.items() if n is not None}, share=share
        )

    @property
    def applied_rate(self):
        """The payload rate the flow's ACKs came back at while its queue stood, against the Link's (AppliedRate), or
        None where that says nothing (no rate, an AQM or policer, loss, other traffic, too little standing queue)."""
        from ..analysis.impairments import RATE_SHARED_SHARE, RateSample, applied_rate

        if self.link is None or self.link.ports or self.samples is None:
            return None
        names = ("bytes_acked", "unacked", "snd_mss", "min_rtt", "busy_time", "rwnd_limited", "total_retrans")
        columns = [dict(self.series(name)) for name in (*names, "ca_state", "snd_wnd", "snd_cwnd")]
        acked, unacked, mss, floor, busy, held, retrans, ca_state, window, cwnd = columns
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
                cwnd[t],
            )
            for t in times
        ]
        return applied_rate(
            self.link,
            samples,
            download=self.direction == "download",
            mss_bytes=self._mss_bytes,
            others_packets=self._count_others(share=RATE_SHARED_SHARE),
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
