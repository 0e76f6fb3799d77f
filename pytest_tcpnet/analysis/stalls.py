"""Stalls named with their evidence: where a connection waited on a timer, not on the path.

From one connection's packets (capture.decode.Packet, as tshark decoded them) and the kernel's counters:

- ``delayed_ack``: a segment whose acknowledgement came as a pure ACK at least DELAYED_ACK_MIN_S after the fastest
  acknowledgement the connection got, with the sender's next data leaving as soon as that ACK came back: the data was
  held (Nagle's algorithm waits for the ACK of a small segment) until the peer's delayed-ACK timer fired (40 ms on
  Linux: TCP_DELACK_MIN = HZ/25). Where the kernel's counters are known, no more such waits are named than the
  peers' TcpExt.DelayedACKs rose by: a late ACK the timer did not send is a busy host's, not a delayed ACK.
- ``rto``: a retransmission after at least RTO_MIN_S of silence from its sender (a retransmission timeout: 200 ms
  at least on Linux).
- ``zero_window``: the receiver advertised a zero window; the stall lasts until its next non-zero one.
- ``idle_restart``: a sender idle past the RTO (200 ms at least) with nothing in flight flew at most the initial
  window after it, having flown more than twice that before: slow start again (tcp_slow_start_after_idle).
- ``receiver_limited``: the sender's final TCP_INFO says the receiver's window held it (rwnd_limited) for at least
  RECEIVER_LIMITED_SHARE of the time it had data to send; no capture needed.

Without a capture, counters alone name the kind (TcpExt.TCPTimeouts) but not when or how long.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

__all__ = ["Stall", "find_stalls", "DELAYED_ACK_MIN_S", "DELAYED_ACK_MAX_S", "RTO_MIN_S"]

#: Extra wait, over the connection's fastest acknowledgement, that counts as a delayed ACK: well under Linux's
#: 40 ms minimum delayed-ACK timer, well over a quick ACK's scheduling noise on a loaded host (a few ms).
DELAYED_ACK_MIN_S = 0.025
#: Linux's longest delayed-ACK timer (TCP_DELACK_MAX = HZ/5), and a tick of slack: an ACK later than that was not
#: delayed by the receiver's timer.
DELAYED_ACK_MAX_S = 0.25
#: How soon after the ACK the held segment must leave (over the base RTT, at a capture on the receiver's side).
_RELEASE_S = 0.005
#: Silence before a retransmission that only a timeout explains (Linux's minimum RTO is 200 ms).
RTO_MIN_S = 0.2
#: A sender held by the receiver's window for at least this long and this share of its time with data is called
#: receiver-limited (shorter or smaller: the usual moments of slow start on an autotuned receiver).
RECEIVER_LIMITED_MIN_S = 0.01
RECEIVER_LIMITED_SHARE = 0.25
#: Linux's initial window, in segments (what a restart after idle begins from).
INITIAL_WINDOW = 10


@dataclass(frozen=True)
class Stall:
    """Stalls of one kind on one connection: how many, how long each (seconds), and the evidence, in words."""

    kind: str
    count: int
    seconds: tuple = field(default=())  # each stall's length (empty where only a counter saw them)
    evidence: str = ""

    @property
    def total_s(self) -> float:
        return sum(self.seconds)

    def describe(self) -> str:
        """One line: kind, count, lengths, evidence."""
        if self.seconds:
            lengths = (
                f", median {statistics.median(self.seconds) * 1e3:.1f} ms, total {self.total_s * 1e3:.0f} ms"
                if len(self.seconds) > 1
                else f" of {self.seconds[0] * 1e3:.1f} ms"
            )
        else:
            lengths = ""
        return f"{self.kind}: {self.count} stall(s){lengths}" + (f" ({self.evidence})" if self.evidence else "")


def find_stalls(packets, counters: dict | None = None, sender_info: dict | None = None) -> list:
    """The stalls of one connection's packets (and, without packets, what its kernel counters say); sender_info, the
    sender's final TCP_INFO, adds the time the receiver's window held it."""
    stalls = _receiver_limited(sender_info or {})
    if packets:
        stalls += _delayed_acks(packets, counters or {})
        stalls += _timeouts(packets)
        stalls += _idle_restarts(packets)
        stalls += _zero_windows(packets)
    elif counters:
        timeouts = sum(side.get("TcpExt.TCPTimeouts", 0) for side in counters.values())
        if timeouts:
            stalls.append(
                Stall(
                    "rto",
                    timeouts,
                    evidence=f"TcpExt.TCPTimeouts {timeouts}; capture=True says when and for how long",
                )
            )
    return stalls


def _receiver_limited(info):
    """The sender's time held by the receiver's window (TCP_INFO's rwnd_limited chrono), when it is a real share."""
    limited = info.get("rwnd_limited") or 0
    # The kernel's busy_time is the sum of all three chronos: busy, rwnd_limited and sndbuf_limited.
    total = max(info.get("busy_time") or 0, limited + (info.get("sndbuf_limited") or 0))
    if not total or limited < RECEIVER_LIMITED_MIN_S * 1e6 or limited < RECEIVER_LIMITED_SHARE * total:
        return []
    return [
        Stall(
            "receiver_limited",
            1,
            (limited / 1e6,),
            f"the sender had data for {total / 1e3:.0f} ms and the receiver's window held it for "
            f"{limited / 1e3:.0f} ms of them (TCP_INFO rwnd_limited, {limited / total:.0%}): the receiving "
            "application's reads or its buffer set the pace",
        )
    ]


def _delayed_acks(packets, counters):
    held = []
    rtt = _handshake_rtt(packets)
    for side in {p.src for p in packets}:
        mine = [p for p in packets if p.src == side and p.len > 0]
        theirs = [p for p in packets if p.dst == side]
        if not mine or not theirs:
            continue
        waits = []  # (index of the segment in mine, the packet that acknowledged it, wait)
        j = 0
        for i, seg in enumerate(mine):
            end = seg.seq + seg.len
            while j < len(theirs) and (theirs[j].time < seg.time or theirs[j].ack < end):
                j += 1
            if j == len(theirs):
                break
            waits.append((i, theirs[j], theirs[j].time - seg.time))
        if not waits:
            continue
        base = min(w for _, _, w in waits)
        # The held segment leaves when the ACK reaches its sender: at once where the capture is the sender's, one
        # round trip after the ACK left where it is the receiver's.
        release = max(base, rtt or 0.0) + _RELEASE_S
        for i, ack, wait in waits:
            if not base + DELAYED_ACK_MIN_S <= wait <= base + DELAYED_ACK_MAX_S or ack.len > 0:
                continue  # acknowledged quickly, by the peer's own data, or later than any delayed-ACK timer
            end = mine[i].seq + mine[i].len
            later = mine[i + 1 : i + 64]
            if any(p.seq == mine[i].seq and p.time < ack.time for p in later):
                continue  # resent before its ACK came: lost, not held
            following = next((p for p in later if p.seq >= end), None)  # past any resends
            if following is not None and 0 <= following.time - ack.time <= release:
                held.append(wait - base)
    if not held:
        return []
    delayed = sum(side.get("TcpExt.DelayedACKs", 0) for side in counters.values())
    unconfirmed = 0
    if counters:
        # Each firing of a delayed-ACK timer sends one ACK and counts once in its namespace's TcpExt.DelayedACKs, so
        # at most that many slow ACKs were the timer's; the rest were late for another reason (a busy host scheduled
        # the peer late: a 25.8 ms gap under 0.8 CPUs of contention, with TCP_NODELAY on both ends). The longest
        # waits are kept: the timer's are at least its 40 ms, less a tick.
        unconfirmed = max(0, len(held) - delayed)
        held = sorted(held, reverse=True)[:delayed]
        if not held:
            return []
    evidence = (
        f"{len(held)} segment(s) waited for a pure ACK {DELAYED_ACK_MIN_S * 1e3:.0f} ms or more beyond the "
        "connection's fastest, and the next data left as soon as it came: small writes held by Nagle's algorithm "
        "until the peer's delayed-ACK timer fired"
        + (f"; the peers' TcpExt.DelayedACKs rose by {delayed}" if delayed else "")
        + (f" ({unconfirmed} more slow ACK(s) beyond that count are not named)" if unconfirmed else "")
        + "; TCP_NODELAY, or one write per message, removes it"
    )
    return [Stall("delayed_ack", len(held), tuple(held), evidence)]


def _handshake_rtt(packets):
    """The round trip the handshake took at this capture point (None without one): SYN to SYN-ACK at the client's
    side, SYN-ACK to its ACK at the server's; the larger of the two is the path's."""
    syn = next((p for p in packets if p.flags == "S"), None)
    synack = next((p for p in packets if p.flags == "SA"), None)
    if syn is None or synack is None:
        return None
    ack = next((p for p in packets if p.time > synack.time and p.src == syn.src and "A" in p.flags), None)
    return max(synack.time - syn.time, (ack.time - synack.time) if ack is not None else 0.0)


def _idle_restarts(packets):
    """A sender idle past the RTO with nothing in flight restarts from the initial window (tcp_slow_start_after_idle):
    its first flight after the pause is at most INITIAL_WINDOW segments where before it flew more than twice that."""
    restarts, seconds = 0, []
    rtt = _handshake_rtt(packets)
    for side in {p.src for p in packets}:
        mine = [p for p in packets if p.src == side and p.len > 0]
        if len(mine) < 2:
            continue
        mss = max(p.len for p in mine)
        acked = [(p.time, p.ack) for p in packets if p.dst == side and "A" in p.flags]
        for k in range(1, len(mine)):
            before, after = mine[k - 1], mine[k]
            if after.time - before.time < RTO_MIN_S:
                continue
            sent = max(p.seq + p.len for p in mine[:k])
            if not any(t <= after.time and ack >= sent for t, ack in acked):
                continue  # data still in flight: a retransmission timeout, not idling
            earlier = [p.bytes_in_flight for p in mine[:k] if p.bytes_in_flight is not None]
            # The first flight: what left before the first ACK of new data came back. (Not "within the handshake's
            # RTT": on a 0 RTT path that is less than the sender takes to put a full window on the wire, and a window
            # kept across the pause read as a restart: docs/design.md, pitfall 17.)
            round_end = min((t for t, ack in acked if t > after.time and ack > sent), default=math.inf)
            first = [p.bytes_in_flight for p in mine[k:] if p.time < round_end and p.bytes_in_flight is not None]
            if not earlier or not first:
                continue
            peak, restart = max(earlier), max(first)
            if restart <= INITIAL_WINDOW * mss * 1.1 and peak > 2 * INITIAL_WINDOW * mss:
                restarts += 1
                # Slow start doubles the flight each round: the rounds to grow back to the peak, at the path's RTT.
                rounds = max(1, math.ceil(math.log2(peak / max(restart, mss))))
                if rtt:
                    seconds.append(rounds * rtt)
    if not restarts:
        return []
    return [
        Stall(
            "idle_restart",
            restarts,
            tuple(seconds),
            f"after {RTO_MIN_S * 1e3:.0f} ms or more idle with nothing in flight, the sender's next flight was "
            f"{INITIAL_WINDOW} segments or fewer where it had flown more than twice that: slow start again "
            "(net.ipv4.tcp_slow_start_after_idle=1; lengths: the rounds to regrow, at the handshake's RTT)",
        )
    ]


def _timeouts(packets):
    gaps = []
    for side in {p.src for p in packets}:
        mine = [p for p in packets if p.src == side]
        for before, p in zip(mine, mine[1:]):
            if "retransmission" in p.expert and "fast_retransmission" not in p.expert:
                gap = p.time - before.time
                if gap >= RTO_MIN_S:
                    gaps.append(gap)
    if not gaps:
        return []
    return [
        Stall(
            "rto",
            len(gaps),
            tuple(gaps),
            f"retransmission(s) after {RTO_MIN_S * 1e3:.0f} ms or more of silence: the retransmission timer fired",
        )
    ]


def _zero_windows(packets):
    lengths, closed_at = [], {}
    for p in packets:
        if "zero_window" in p.expert and p.window == 0:
            closed_at.setdefault(p.src, p.time)
        elif p.window > 0 and p.src in closed_at:
            lengths.append(p.time - closed_at.pop(p.src))
    if not lengths and not closed_at:
        return []
    return [
        Stall(
            "zero_window",
            len(lengths) + len(closed_at),
            tuple(lengths),
            "the receiver advertised a zero window (its application did not read) until its next update"
            + (f"; {len(closed_at)} still closed at the end" if closed_at else ""),
        )
    ]
