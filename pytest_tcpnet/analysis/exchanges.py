"""Request/response exchanges of one connection, from its packets: who asked, how much, how long the answer took.

An exchange starts with the client's first new payload after the server's last answer (or after the handshake)
and ends with the last new payload of the server's answer before the client asks again. Its latency is from the
request's first byte to the response's last, as the capture point saw them (at the client's side: what the client
waited; at the server's, less one round trip). Resent bytes count once.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Exchange", "find_exchanges"]


@dataclass(frozen=True)
class Exchange:
    """One request and its response: times in seconds since the capture's first packet, payload bytes each way."""

    number: int
    started: float  # the request's first byte
    ended: float  # the response's last byte (the request's last, for a request nobody answered)
    request_bytes: int
    response_bytes: int

    @property
    def latency_s(self) -> float:
        """From the request's first byte to the response's last."""
        return self.ended - self.started

    def describe(self) -> str:
        return (
            f"#{self.number} at {self.started:.4f} s: {self.request_bytes} B asked, {self.response_bytes} B "
            f"answered in {self.latency_s * 1e3:.2f} ms"
        )


def find_exchanges(packets, client: str) -> list:
    """The exchanges in one connection's packets (capture.decode.Packet); client is its "address:port"."""
    exchanges: list = []
    high: dict[str, int] = {}  # side -> highest payload byte seen (relative sequence), so resends count once
    current: list | None = None  # [started, ended, request_bytes, response_bytes]
    for p in packets:
        if p.len <= 0:
            continue
        new = max(0, p.seq + p.len - max(high.get(p.src, 1), p.seq))
        high[p.src] = max(high.get(p.src, 1), p.seq + p.len)
        if not new:
            continue
        if p.src == client:
            if current is None or current[3] > 0:  # a new request: the previous one was answered
                if current is not None:
                    exchanges.append(Exchange(len(exchanges) + 1, *current))
                current = [p.time, p.time, 0, 0]
            current[2] += new
            if not current[3]:
                current[1] = p.time
        elif current is not None:
            current[3] += new
            current[1] = p.time
    if current is not None:
        exchanges.append(Exchange(len(exchanges) + 1, *current))
    return exchanges
