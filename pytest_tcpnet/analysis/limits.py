"""What limited a sender, from the kernel's chrono counters in TCP_INFO (busy_time, rwnd_limited, sndbuf_limited).

The kernel times three states while data is outstanding: busy (sending, so bounded by the
congestion window or the path), rwnd-limited (the peer's window is full) and sndbuf-limited
(the application is blocked on a full send buffer and the queue ran dry); tcpi_busy_time
is their sum. Time outside all three, within the transfer, is the application not writing.
"""

__all__ = ["LABELS", "limited_by"]

LABELS = ("rwnd", "sndbuf", "cwnd", "app")


def limited_by(tcp_info, duration_s=None):
    """(label, shares): the state the sender spent most time in, and every state's share of the time.

    tcp_info: a decoded TCP_INFO dict (microsecond counters). duration_s, when given, is the
    transfer's length: the time not busy counts as "app". Without it, shares are of busy time.
    """
    missing = [k for k in ("busy_time", "rwnd_limited", "sndbuf_limited") if tcp_info.get(k) is None]
    if missing:
        raise ValueError(f"tcp_info: lacks {', '.join(missing)} (kernel older than 4.10?); cannot tell the limit")
    busy = tcp_info["busy_time"] / 1e6
    rwnd = tcp_info["rwnd_limited"] / 1e6
    sndbuf = tcp_info["sndbuf_limited"] / 1e6
    total = max(busy, duration_s or 0.0)
    if total <= 0:
        return "app", {"rwnd": 0.0, "sndbuf": 0.0, "cwnd": 0.0, "app": 1.0}
    shares = {"rwnd": rwnd / total, "sndbuf": sndbuf / total, "cwnd": max(0.0, busy - rwnd - sndbuf) / total,
              "app": max(0.0, total - busy) / total}
    return max(LABELS, key=shares.get), shares
