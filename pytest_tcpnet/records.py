"""The fields a measurement records of every socket, in one place: what each sample holds and in which order.

Below everything that measures or reports (netlink fills them, measure samples them, results reads them),
so no layer has to import another sideways to learn a record's shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = ["TCP_INFO_SERIES", "SKMEM_FIELDS", "SERIES_FIELDS", "SocketSample", "ConnectionEnd", "RequestTimes"]

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
    # segs_out: what the path's qdiscs carried of this connection, so what was other traffic (others_packets).
    "segs_out",
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


class SocketSample(NamedTuple):
    """One sample of one socket: its TCP_INFO fields (TCP_INFO_SERIES), then its socket memory (SKMEM_FIELDS), by the
    kernel's names; None where the kernel did not report one (a socket in TIME_WAIT has no TCP_INFO).

    A tuple, so a long run's samples cost what plain rows do; `SERIES_FIELDS` is its field order.
    """

    state: int | None = None
    ca_state: int | None = None
    retransmits: int | None = None
    probes: int | None = None
    backoff: int | None = None
    rto: int | None = None
    unacked: int | None = None
    lost: int | None = None
    retrans: int | None = None
    rtt: int | None = None
    rttvar: int | None = None
    snd_ssthresh: int | None = None
    snd_cwnd: int | None = None
    rcv_ssthresh: int | None = None
    rcv_space: int | None = None
    snd_mss: int | None = None
    total_retrans: int | None = None
    pacing_rate: int | None = None
    bytes_acked: int | None = None
    bytes_received: int | None = None
    bytes_sent: int | None = None
    notsent_bytes: int | None = None
    min_rtt: int | None = None
    delivery_rate: int | None = None
    busy_time: int | None = None
    rwnd_limited: int | None = None
    sndbuf_limited: int | None = None
    snd_wnd: int | None = None
    rcv_wnd: int | None = None
    bytes_retrans: int | None = None
    dsack_dups: int | None = None
    segs_out: int | None = None
    rmem_alloc: int | None = None
    rcvbuf: int | None = None
    wmem_alloc: int | None = None
    sndbuf: int | None = None
    fwd_alloc: int | None = None
    wmem_queued: int | None = None
    optmem: int | None = None
    backlog: int | None = None
    drops: int | None = None

    def tcp_info(self) -> dict:
        """The TCP_INFO fields it holds (no socket memory), those the kernel reported."""
        return {name: value for name, value in zip(TCP_INFO_SERIES, self) if value is not None}


if SocketSample._fields != SERIES_FIELDS:  # the class above is written out for type checkers: keep it in step
    raise ImportError("records.SocketSample's fields differ from SERIES_FIELDS")


#: The fields of a ConnectionEnd that hold a dict (present, maybe empty, in every end).
_DICT_FIELDS = ("tcp_info", "buffers", "buffers_at_connect", "extra")


@dataclass(frozen=True)
class ConnectionEnd(Mapping):
    """One end of a connection as its workload or the sampler recorded it (None: not known there).

    Times are monotonic seconds. Read it by attribute; reading it as a mapping (``end["pauses"]``,
    ``end.get("last_byte_at")``) still works, a field that is None reading as absent.
    """

    #: "sender" or "receiver", where the workload says.
    role: str | None = None
    #: Payload bytes this end received (the receiver) or wrote (the sender).
    nbytes: int | None = None
    #: (address, port) of this end and of its peer.
    local: tuple | None = None
    remote: tuple | None = None
    connected_at: float | None = None
    #: The receiver's first data byte and the size of that first read (not timed), its last byte, and
    #: (time, bytes so far) along the way.
    first_byte_at: float | None = None
    first_read: int | None = None
    last_byte_at: float | None = None
    checkpoints: list | None = None
    #: The sender's first write, its last, and when the last byte was acknowledged.
    first_write_at: float | None = None
    written_at: float | None = None
    acked_at: float | None = None
    #: Where the application paused reading or writing: [(at, seconds)].
    pauses: list | None = None
    #: The kernel's stamps of the connection's SYN and last FIN or RST, and when its socket was destroyed.
    syn_at: float | None = None
    fin_at: float | None = None
    closed_at: float | None = None
    #: An observed connection that opened and closed between two samples (bytes exact, times bounded).
    between_samples: bool = False
    #: The end's last TCP_INFO, by the kernel's field names.
    tcp_info: dict = field(default_factory=dict)
    #: Socket buffers (and congestion control) at the end, and at connect.
    buffers: dict = field(default_factory=dict)
    buffers_at_connect: dict = field(default_factory=dict)
    #: What a workload reported beyond these fields, by its own names.
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_record(cls, record: Mapping[str, Any] | None) -> ConnectionEnd:
        """An end from a workload's record (a dict from its process): known keys to fields, the rest to ``extra``."""
        if isinstance(record, cls):
            return record
        known = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        record = dict(record or {})
        record.pop("event", None)  # the message's kind, from the workload's process
        values = {k: v for k, v in record.items() if k in known}
        for name in ("local", "remote"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**values, extra={k: v for k, v in record.items() if k not in known})

    def replace(self, **changes: Any) -> ConnectionEnd:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    def __getitem__(self, key: str) -> Any:
        if key in self.extra:
            return self.extra[key]
        value = getattr(self, key, None) if key in _FIELD_NAMES else None
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        yield from (name for name in _FIELD_NAMES if getattr(self, name) is not None)
        yield from self.extra

    def __len__(self) -> int:
        return sum(1 for _ in self)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(ConnectionEnd) if f.name != "extra")


class RequestTimes(NamedTuple):
    """One request/response exchange as its client timed it (monotonic seconds): when it started (before connecting,
    on a new connection), connected, got the response's first byte, and its last."""

    started: float
    connected: float
    first_byte: float
    done: float
