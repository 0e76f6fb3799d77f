"""Packet capture on a lab node (dumpcap) and its decoding with tshark's TCP expert analysis."""

from .capture import DEFAULT_SNAPLEN, SETTLE_S, Capture, CaptureResult
from .decode import EVENT_KINDS, Packet, count_events, decode_pcap

__all__ = [
    "Capture",
    "CaptureResult",
    "Packet",
    "EVENT_KINDS",
    "DEFAULT_SNAPLEN",
    "SETTLE_S",
    "decode_pcap",
    "count_events",
]
