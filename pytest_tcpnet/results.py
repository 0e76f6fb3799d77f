"""What a transfer measured, with the conditions it ran under (kernel, sysctls, link, buffers)."""

from dataclasses import dataclass, field

from .model import Host, Link, format_rate, format_size, format_time

__all__ = ["TransferResult", "WindowProbe"]

_TC_H_ROOT = 0xFFFFFFFF


@dataclass(frozen=True)
class TransferResult:
    """One bulk transfer: goodput as the receiving application saw it, plus everything needed to explain it."""

    nbytes: int
    duration_s: float
    direction: str
    kernel: str
    link: Link
    client: Host
    server: Host
    sysctls: dict
    sndbuf_requested: "int | None" = None
    rcvbuf_requested: "int | None" = None
    sender: dict = field(default_factory=dict, repr=False)
    receiver: dict = field(default_factory=dict, repr=False)
    offloads: dict = field(default_factory=dict, repr=False)
    qdiscs: dict = field(default_factory=dict, repr=False)
    interfaces: dict = field(default_factory=dict, repr=False)

    @property
    def throughput_bps(self):
        """Goodput in bit/s: payload bytes over connection-established-to-last-byte at the receiver."""
        return self.nbytes * 8 / self.duration_s

    @property
    def cc(self):
        """The congestion control the sending socket really used."""
        return self.sender.get("buffers", {}).get("cc")

    @property
    def sender_tcp_info(self):
        """The sender's final TCP_INFO (after the last byte was acknowledged)."""
        return self.sender.get("tcp_info", {})

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

    def tcp_info_series(self, field):
        """Values of one sampled TCP_INFO field over the transfer (empty unless sample_interval was set)."""
        samples = self.sender.get("samples")
        if not samples:
            return []
        column = samples["fields"].index(field)
        return [row[column] for row in samples["rows"]]

    @property
    def emulator_drops(self):
        """Packets the router's qdiscs dropped (loss the spec asked for plus queue overflow).

        Only root qdiscs count: an htb root already includes its leaf's drops.
        """
        return sum(q["drops"] for stats in self.qdiscs.values() for q in stats if q["parent"] == _TC_H_ROOT)

    @property
    def interface_drops(self):
        """Packets the veths themselves dropped (e.g. a receive backlog overflow), by 'role/ifname'."""
        return {end: c["rx_dropped"] + c["tx_dropped"] for end, c in self.interfaces.items()
                if c["rx_dropped"] + c["tx_dropped"]}

    def describe(self):
        """The conditions, one per line, for failure reports."""
        buffers = self.sender.get("buffers", {})
        rbuffers = self.receiver.get("buffers", {})
        lines = [
            f"transfer: {format_size(self.nbytes)} {self.direction} in {format_time(self.duration_s)} "
            f"= {format_rate(self.throughput_bps)}",
            f"link: {self.link.describe()}",
            f"client: {self.client.describe()}; server: {self.server.describe()}",
            f"sender socket: SO_SNDBUF {self.sndbuf_requested or 'auto'} -> {buffers.get('sndbuf')} B, cc {self.cc}; "
            f"receiver socket: SO_RCVBUF {self.rcvbuf_requested or 'auto'} -> {rbuffers.get('rcvbuf')} B",
            f"kernel: {self.kernel}",
        ]
        info = self.sender_tcp_info
        if info:
            lines.append(f"sender TCP_INFO: rtt {info.get('rtt', 0) / 1000:.3g} ms, cwnd {info.get('snd_cwnd')}, "
                         f"retrans {info.get('total_retrans')} (dsack {info.get('dsack_dups')}), rwnd_limited {info.get('rwnd_limited', 0) / 1000:.4g} ms, "
                         f"sndbuf_limited {info.get('sndbuf_limited', 0) / 1000:.4g} ms, "
                         f"busy {info.get('busy_time', 0) / 1000:.4g} ms")
        if self.qdiscs:
            lines.append(f"router qdisc drops: {self.emulator_drops}; veth drops: {self.interface_drops or 0}")
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
