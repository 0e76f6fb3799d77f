"""Decode struct tcp_info (linux/tcp.h) from getsockopt(TCP_INFO) bytes; stdlib only.

Fields newer than the running kernel are simply absent: the kernel returns a shorter struct.
"""

import functools
import struct

__all__ = ["TCP_INFO_FIELDS", "decode_tcp_info", "field_reader"]

# (name, struct code) in kernel order; the 8 leading u8 fields pack bitfields we split below.
TCP_INFO_FIELDS = (
    [
        ("state", "B"),
        ("ca_state", "B"),
        ("retransmits", "B"),
        ("probes", "B"),
        ("backoff", "B"),
        ("options", "B"),
        ("wscale", "B"),
        ("flags8", "B"),
    ]
    + [
        (name, "I")
        for name in (
            "rto",
            "ato",
            "snd_mss",
            "rcv_mss",
            "unacked",
            "sacked",
            "lost",
            "retrans",
            "fackets",
            "last_data_sent",
            "last_ack_sent",
            "last_data_recv",
            "last_ack_recv",
            "pmtu",
            "rcv_ssthresh",
            "rtt",
            "rttvar",
            "snd_ssthresh",
            "snd_cwnd",
            "advmss",
            "reordering",
            "rcv_rtt",
            "rcv_space",
            "total_retrans",
        )
    ]
    + [(name, "Q") for name in ("pacing_rate", "max_pacing_rate", "bytes_acked", "bytes_received")]
    + [(name, "I") for name in ("segs_out", "segs_in", "notsent_bytes", "min_rtt", "data_segs_in", "data_segs_out")]
    + [(name, "Q") for name in ("delivery_rate", "busy_time", "rwnd_limited", "sndbuf_limited")]
    + [(name, "I") for name in ("delivered", "delivered_ce")]
    + [(name, "Q") for name in ("bytes_sent", "bytes_retrans")]
    + [(name, "I") for name in ("dsack_dups", "reord_seen", "rcv_ooopack", "snd_wnd", "rcv_wnd", "rehash")]
)


def decode_tcp_info(raw):
    """Return {field: int} for every field fully contained in raw (native alignment, as the kernel lays it out)."""
    result = {}
    fmt = "@"
    for name, code in TCP_INFO_FIELDS:
        candidate = fmt + code
        if struct.calcsize(candidate) > len(raw):
            break
        fmt = candidate
        result[name] = None
    values = struct.unpack_from(fmt, raw) if result else ()
    result = dict(zip(result, values))
    if "wscale" in result:
        result["snd_wscale"] = result["wscale"] & 0x0F
        result["rcv_wscale"] = result.pop("wscale") >> 4
    if "flags8" in result:
        result["delivery_rate_app_limited"] = result.pop("flags8") & 0x01
    return result


def field_reader(name):
    """(bytes to ask getsockopt for, a function of those bytes giving the field): one field, read alone and cheaply."""
    fmt = "@"
    for field, code in TCP_INFO_FIELDS:
        fmt += code
        if field == name:
            one = struct.Struct("@" + code)
            end = struct.calcsize(fmt)  # native alignment: the field ends here, whatever padding precedes it
            return end, functools.partial(_unpack_one, one, end - one.size)
    raise KeyError(f"struct tcp_info has no field {name!r}")


def _unpack_one(one, offset, raw):
    """The one field `one` at offset in raw."""
    return one.unpack_from(raw, offset)[0]
