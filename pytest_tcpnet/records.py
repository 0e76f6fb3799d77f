"""The fields a measurement records of every socket, in one place: what each sample holds and in which order.

Below everything that measures or reports (netlink fills them, measure samples them, results reads them),
so no layer has to import another sideways to learn a record's shape.
"""

from __future__ import annotations

__all__ = ["TCP_INFO_SERIES", "SKMEM_FIELDS", "SERIES_FIELDS"]

#: TCP_INFO fields kept per sample (the rest of the struct is in each end's final record).
TCP_INFO_SERIES = (
    "state",
    "ca_state",
    "retransmits",
    "probes",
    "backoff",
    "rto",
    "unacked",
    "lost",
    "retrans",
    "rtt",
    "rttvar",
    "snd_ssthresh",
    "snd_cwnd",
    "rcv_ssthresh",
    "rcv_space",
    "snd_mss",
    "total_retrans",
    "pacing_rate",
    "bytes_acked",
    "bytes_received",
    "bytes_sent",
    "notsent_bytes",
    "min_rtt",
    "delivery_rate",
    "busy_time",
    "rwnd_limited",
    "sndbuf_limited",
    "snd_wnd",
    "rcv_wnd",
    "bytes_retrans",
    "dsack_dups",
)
#: The kernel's SK_MEMINFO_* order: what `ss -m` prints as r, rb, t, tb, f, w, o, bl, d.
SKMEM_FIELDS = (
    "rmem_alloc",
    "rcvbuf",
    "wmem_alloc",
    "sndbuf",
    "fwd_alloc",
    "wmem_queued",
    "optmem",
    "backlog",
    "drops",
)
#: One socket sample's values, in this order.
SERIES_FIELDS = TCP_INFO_SERIES + SKMEM_FIELDS
