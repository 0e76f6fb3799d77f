"""Decode a pcap with tshark's own TCP dissector and expert analysis into plain per-packet records."""

import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass

from ..errors import program_path

__all__ = ["EVENT_KINDS", "Packet", "decode_pcap", "count_events", "endpoint_text"]

#: Expert events we count, by the name used in results, and the tshark field that flags each.
EVENT_FIELDS = {
    "window_full": "tcp.analysis.window_full",
    "zero_window": "tcp.analysis.zero_window",
    "zero_window_probe": "tcp.analysis.zero_window_probe",
    "window_update": "tcp.analysis.window_update",
    "retransmission": "tcp.analysis.retransmission",
    "fast_retransmission": "tcp.analysis.fast_retransmission",
    "spurious_retransmission": "tcp.analysis.spurious_retransmission",
    "duplicate_ack": "tcp.analysis.duplicate_ack",
    "out_of_order": "tcp.analysis.out_of_order",
    "lost_segment": "tcp.analysis.lost_segment",
}
#: ECN's TCP signals, from the flags: the receiver echoing a CE mark (ECE) and the sender's answer (CWR);
#: a SYN's ECE/CWR negotiate ECN and are not counted.
FLAG_EVENTS = {"ece": "E", "cwr": "C"}
EVENT_KINDS = tuple(EVENT_FIELDS) + tuple(FLAG_EVENTS)

# tcp.window_size is the *calculated* window (the raw field shifted by the scale seen in the SYNs).
_VALUE_FIELDS = (
    "frame.time_relative",
    "tcp.stream",
    "ip.src",
    "tcp.srcport",
    "ip.dst",
    "tcp.dstport",
    "tcp.seq",
    "tcp.ack",
    "tcp.len",
    "tcp.window_size",
    "tcp.analysis.bytes_in_flight",
    "tcp.flags",
    "ipv6.src",
    "ipv6.dst",
)
# Linux probes a zero window from its persist timer with a keep-alive-shaped segment (seq = snd_una - 1,
# no payload), which tshark labels "TCP Keep-Alive", not "ZeroWindowProbe" (that needs a 1-byte probe).
_KEEP_ALIVE = "tcp.analysis.keep_alive"
_FLAG_LETTERS = ((0x01, "F"), (0x02, "S"), (0x04, "R"), (0x08, "P"), (0x10, "A"), (0x20, "U"), (0x40, "E"), (0x80, "C"))


@dataclass(frozen=True)
class Packet:
    """One TCP segment as tshark decoded it; sequence numbers are relative to the flow's ISN."""

    time: float  # seconds since the first captured packet
    stream: int
    src: str  # "address:port" ("[address]:port" for IPv6)
    dst: str
    direction: str  # "data" (from the side that sent the most payload) or "ack"
    seq: int
    ack: int
    window: int  # receive window this packet advertises, in bytes (scaled)
    peer_window: "int | None"  # the window the other side last advertised: the sender's limit
    len: int  # payload bytes
    bytes_in_flight: "int | None"  # tshark's estimate, on data segments only
    flags: str  # e.g. "SA", "A", "PA", "FA"
    expert: tuple  # event kinds flagged on this packet, e.g. ("window_full",)

    def brief(self):
        """One line for failure messages: time, direction, seq/ack, length, window, events."""
        events = f" [{', '.join(self.expert)}]" if self.expert else ""
        flight = "" if self.bytes_in_flight is None else f" in_flight={self.bytes_in_flight}"
        return (
            f"t={self.time:.6f}s {self.direction:4} {self.src}->{self.dst} seq={self.seq} ack={self.ack} "
            f"len={self.len} win={self.window} peer_win={self.peer_window}{flight}{events}"
        )


def tshark_path():
    """Path of tshark (Wireshark's command-line analyser)."""
    return program_path("tshark", package="tshark")


def decode_pcap(pcap, *, timeout=300):
    """All TCP packets of pcap as Packet records, in capture order (tshark -T fields)."""
    ran = _elsewhere(pcap, timeout) if _elsewhere is not None else None
    returncode, stdout, stderr = ran or run_tshark(pcap, timeout=timeout)
    if returncode != 0:
        raise RuntimeError(f"tshark could not decode {pcap}: exit {returncode}: {stderr.strip()}")
    rows = [line.split("\t") for line in stdout.splitlines() if line]
    return _records(rows, len(_VALUE_FIELDS))


def run_tshark(pcap, *, timeout=300):
    """Run tshark's field export on pcap here: (returncode, stdout, stderr)."""
    argv = [
        tshark_path(),
        "-n",
        "-r",
        str(pcap),
        "-Y",
        "tcp",
        "-T",
        "fields",
        "-E",
        "separator=\t",
        "-E",
        "occurrence=f",
        "-o",
        "tcp.analyze_sequence_numbers:TRUE",
        "-o",
        "tcp.relative_sequence_numbers:TRUE",
    ]
    for name in _VALUE_FIELDS + tuple(EVENT_FIELDS.values()) + (_KEEP_ALIVE,):
        argv += ["-e", name]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


# Where tshark runs: here, unless a --tcpnet-vm guest handed decoding to the host (vm/hostcall.py: under
# software emulation tshark is slow to start; the host runs the same binary; docs/vm.md, "Analysis on the host").
_elsewhere = None


def run_elsewhere(delegate):
    """From now on delegate(pcap, timeout) -> (returncode, stdout, stderr) runs tshark (None: run it here)."""
    global _elsewhere
    _elsewhere = delegate


def endpoint_text(address, port):
    """'198.18.0.2:5201' or '[2001:2::2]:5201': how a packet's ends are spelt."""
    return f"[{address}]:{port}" if ":" in str(address) else f"{address}:{port}"


def _records(rows, nvalues):
    """Packet records from tshark field rows; each stream's data direction is the one that sent most payload."""
    for row in rows:
        # An IPv6 packet has its addresses in the ipv6 fields (12, 13), and none in the ip ones.
        row[2], row[4] = endpoint_text(row[2] or row[12], row[3]), endpoint_text(row[4] or row[13], row[5])
    payload = defaultdict(Counter)
    for row in rows:
        payload[row[1]][row[2]] += int(row[8] or 0)
    senders = {stream: counts.most_common(1)[0][0] for stream, counts in payload.items()}
    packets, last_window = [], {}  # (stream, src) -> window that side last advertised
    for row in rows:
        flags = int(row[11], 16) if row[11] else 0
        src = row[2]
        letters = "".join(letter for bit, letter in _FLAG_LETTERS if flags & bit)
        expert = tuple(kind for kind, value in zip(EVENT_FIELDS, row[nvalues:]) if value)
        if "S" not in letters:
            expert += tuple(kind for kind, letter in FLAG_EVENTS.items() if letter in letters)
        window = int(row[9] or 0)
        last_window[(row[1], src)] = window
        peer_window = last_window.get((row[1], row[4]))
        if row[-1] and peer_window == 0 and "zero_window_probe" not in expert:
            expert += ("zero_window_probe",)  # a keep-alive into a zero window: Linux's persist-timer probe
        packets.append(
            Packet(
                time=float(row[0]),
                stream=int(row[1] or 0),
                src=src,
                dst=row[4],
                direction="data" if src == senders[row[1]] else "ack",
                seq=int(row[6] or 0),
                ack=int(row[7] or 0),
                len=int(row[8] or 0),
                window=window,
                peer_window=peer_window,
                bytes_in_flight=int(row[10]) if row[10] else None,
                flags=letters,
                expert=expert,
            )
        )
    return packets


def count_events(packets):
    """{kind: count} over packets, every kind present (0 when never flagged)."""
    counts = dict.fromkeys(EVENT_KINDS, 0)
    for packet in packets:
        for kind in packet.expert:
            counts[kind] += 1
    return counts
