"""TCP formulas the assertions compare measurements with (pure, SI units)."""

import math

from .validation import check_integer, check_number

__all__ = [
    "bdp",
    "window_limited_throughput",
    "window_limited_transfer_time",
    "window_for_throughput",
    "effective_socket_buffer",
    "advertised_window_adv_win_scale",
    "mathis_throughput",
    "transfer_time",
    "SOCK_MIN_RCVBUF",
    "SOCK_MIN_SNDBUF",
]


def bdp(rate_bps, rtt_s):
    """Bandwidth-delay product in bytes: what must be in flight to fill the link."""
    _positive("rate_bps", rate_bps)
    _nonnegative("rtt_s", rtt_s)
    return rate_bps * rtt_s / 8


def window_limited_throughput(window_bytes, rtt_s):
    """Throughput in bit/s of a flow that sends one window per round trip (C1: window / RTT)."""
    _positive("window_bytes", window_bytes)
    _positive("rtt_s", rtt_s)
    return window_bytes * 8 / rtt_s


def window_for_throughput(rate_bps, rtt_s):
    """The window in bytes needed to reach rate_bps at rtt_s (the BDP, by another name)."""
    return bdp(rate_bps, rtt_s)


#: The kernel's floors for a setsockopt request (include/net/sock.h): TCP_SKB_MIN_TRUESIZE is
#: 2048 + the cache-aligned sk_buff (256 on x86-64); SOCK_MIN_RCVBUF is one of those, SOCK_MIN_SNDBUF two.
TCP_SKB_MIN_TRUESIZE = 2048 + 256
SOCK_MIN_RCVBUF = TCP_SKB_MIN_TRUESIZE
SOCK_MIN_SNDBUF = 2 * TCP_SKB_MIN_TRUESIZE


def effective_socket_buffer(requested_bytes, cap_bytes, *, kind="rcv"):
    """What SO_SNDBUF/SO_RCVBUF really give: min(request, net.core.*mem_max) doubled, at least the kernel's floor (C12).

    kind "rcv" or "snd" picks the floor (SOCK_MIN_RCVBUF 2304 B, SOCK_MIN_SNDBUF 4608 B).
    """
    _positive("requested_bytes", requested_bytes)
    _positive("cap_bytes", cap_bytes)
    if kind not in ("rcv", "snd"):
        raise ValueError(f"kind: must be 'rcv' or 'snd', got {kind!r}")
    floor = SOCK_MIN_RCVBUF if kind == "rcv" else SOCK_MIN_SNDBUF
    return int(max(2 * min(requested_bytes, cap_bytes), floor))


def advertised_window_adv_win_scale(rcvbuf_bytes, adv_win_scale=1):
    """Usable receive window for kernels before 6.6, where tcp_adv_win_scale reserves overhead (C8).

    With scale > 0 the window is space - space/2^scale (scale 1: half the buffer);
    with scale <= 0 it is space/2^-scale.
    """
    _positive("rcvbuf_bytes", rcvbuf_bytes)
    if adv_win_scale > 0:
        return rcvbuf_bytes - (
            rcvbuf_bytes >> adv_win_scale if isinstance(rcvbuf_bytes, int) else rcvbuf_bytes / 2**adv_win_scale
        )
    return rcvbuf_bytes / 2 ** (-adv_win_scale)


#: Mathis et al.'s C for Reno with delayed ACKs off: sqrt(3/2) ~ 1.22.
MATHIS_CONSTANT = math.sqrt(1.5)


def mathis_throughput(mss_bytes, rtt_s, loss, constant=MATHIS_CONSTANT):
    """Upper bound in bit/s of a Reno-style flow under random loss: MSS/RTT * C/sqrt(p) (Mathis 1997)."""
    _positive("mss_bytes", mss_bytes)
    _positive("rtt_s", rtt_s)
    if not 0 < loss <= 1:
        raise ValueError(f"loss: must be in (0, 1], got {loss!r}")
    return mss_bytes * 8 / rtt_s * constant / math.sqrt(loss)


def window_limited_transfer_time(nbytes, window_bytes, rtt_s, *, mss_bytes=1448, initial_window_segments=10):
    """Seconds from connect to last byte of a transfer capped by a window: round trips of min(cwnd, window).

    Slow start doubles cwnd from the initial window each round trip; a short transfer pays
    those rounds, which window / RTT (the steady-state law) leaves out. The receiver sees
    round k's data k round trips after its connect() returned (the handshake's last ACK
    reaches the sender half an RTT later, the data another half).
    """
    _positive("nbytes", nbytes)
    _positive("window_bytes", window_bytes)
    _positive("rtt_s", rtt_s)
    sent, cwnd, rounds = 0, initial_window_segments * mss_bytes, 0
    while sent < nbytes:
        sent += min(cwnd, window_bytes)
        cwnd *= 2
        rounds += 1
    return rounds * rtt_s


#: Linux's smallest retransmission timeout: idle longer than the RTO restarts slow start (RFC 2861).
TCP_RTO_MIN_S = 0.2


def request_response_times(
    count,
    response_bytes,
    *,
    rtt_s,
    window_bytes,
    rate_bps=None,
    new_connection=False,
    interval_s=0.0,
    slow_start_after_idle=True,
    mss_bytes=1448,
    initial_window_segments=10,
    request_bytes=None,
    request_rate_bps=None,
):
    """Expected seconds from each request's start to its response's last byte: [one per request].

    A new connection pays its handshake (1 RTT); the request reaches the server half an RTT
    later, and the response leaves in rounds of min(cwnd, window) bytes, each round lasting an
    RTT or its time on the link (rate_bps; payload rate), whichever is longer, the last one
    arriving half an RTT after it left. cwnd starts at the initial window on a new connection
    and after idling longer than the RTO (net.ipv4.tcp_slow_start_after_idle=1, the default),
    doubles per round (slow start) up to the window, and carries over between back-to-back
    requests on one connection. A request of request_bytes leaves the client the same way
    (its own cwnd, at request_rate_bps: None for an unshaped way) before it reaches the server;
    without request_bytes it is taken as too small to take time.
    """
    for name, value in (("count", count), ("response_bytes", response_bytes)):
        check_integer(name, value, 1)
    if request_bytes is not None:
        check_integer("request_bytes", request_bytes, 1)
    _nonnegative("rtt_s", rtt_s)
    _positive("window_bytes", window_bytes)
    initial = initial_window_segments * mss_bytes
    rto = TCP_RTO_MIN_S + rtt_s
    times, cwnd, request_cwnd = [], initial, initial
    for index in range(count):
        if new_connection or (index and slow_start_after_idle and interval_s - times[-1] > rto):
            cwnd = request_cwnd = initial
        elapsed = rtt_s if new_connection else 0.0
        if request_bytes is not None:
            asking, request_cwnd = _rounds_s(request_bytes, request_cwnd, window_bytes, request_rate_bps, rtt_s)
            elapsed += asking
        answering, cwnd = _rounds_s(response_bytes, cwnd, window_bytes, rate_bps, rtt_s)
        elapsed += rtt_s + answering
        times.append(elapsed)
    return times


def _rounds_s(nbytes, cwnd, window_bytes, rate_bps, rtt_s):
    """(seconds from the first byte leaving to the last leaving the link, cwnd after): nbytes in rounds of
    min(cwnd, window), each an RTT or its time on the link, whichever is longer; cwnd doubles (slow start) up to the
    window."""
    sent, rounds = 0, []
    while sent < nbytes:
        size = min(cwnd, window_bytes, nbytes - sent)
        rounds.append(size * 8 / rate_bps if rate_bps else 0.0)
        sent += size
        if sent < nbytes or size == min(cwnd, window_bytes):
            cwnd = min(2 * cwnd, max(cwnd, window_bytes))
    return sum(max(rtt_s, r) for r in rounds[:-1]) + rounds[-1], cwnd


def transfer_time(nbytes, rate_bps):
    """Seconds to move nbytes at rate_bps."""
    _positive("rate_bps", rate_bps)
    _nonnegative("nbytes", nbytes)
    return nbytes * 8 / rate_bps


def _positive(name, value):
    check_number(name, value, 0, low_open=True)


def _nonnegative(name, value):
    check_number(name, value, 0)
