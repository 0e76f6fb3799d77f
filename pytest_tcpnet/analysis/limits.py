"""What limited a sender, from the kernel's chrono counters in TCP_INFO (busy_time, rwnd_limited, sndbuf_limited).

The kernel times three states while data is outstanding: busy (sending, so bounded by the
congestion window or the path), rwnd-limited (the peer's window is full) and sndbuf-limited
(the application is blocked on a full send buffer and the queue ran dry); tcpi_busy_time
is their sum. Time outside all three, within the transfer, is the application not writing.

The sndbuf state starts only when a transmission empties the write queue while the writer
already waits for space. A writer of small blocking send()s never meets that: its data leaves
at once, and it waits only between transmissions; the kernel counts that time as busy. So a
sampled series of the sender's socket tells it too (send_buffer_bound_share).
"""

__all__ = ["LABELS", "limited_by", "send_buffer_bound_share"]

LABELS = ("rwnd", "sndbuf", "cwnd", "app")


def limited_by(tcp_info, duration_s=None, samples=None):
    """(label, shares): the state the sender spent most time in, and every state's share of the time.

    tcp_info: a decoded TCP_INFO dict (microsecond counters). duration_s, when given, is the
    transfer's length: the time not busy counts as "app". Without it, shares are of busy time.
    samples: the sender's sampled rows (see send_buffer_bound_share); when most show a full send
    buffer with nothing unsent, time the chrono counted as busy is "sndbuf". Shares stay the chrono's.
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
    label = max(LABELS, key=shares.get)
    if label == "cwnd" and samples and (send_buffer_bound_share(samples) or 0) > 0.5:
        label = "sndbuf"
    return label, shares


#: A sample's send buffer counts as full from this share of SO_SNDBUF charged (truesize, not payload).
FULL_SEND_BUFFER = 0.75


def send_buffer_bound_share(samples):
    """Share of sender samples in which the send buffer alone held the flow back.

    samples: dicts with notsent_bytes, wmem_queued, sndbuf, unacked, snd_cwnd, snd_wnd and
    snd_mss (TCP_INFO and socket memory of the sender, as the sampler reads them). A sample is
    send-buffer-bound when all that was written is in flight (nothing unsent), the buffer is
    full, and neither the congestion window nor the peer's window is. None without samples.
    """
    usable = [s for s in samples if all(s.get(k) is not None for k in
                                        ("notsent_bytes", "wmem_queued", "sndbuf", "unacked", "snd_cwnd"))]
    if not usable:
        return None

    def bound(s):
        mss = s.get("snd_mss") or 1448
        window_room = s.get("snd_wnd") is None or s["unacked"] * mss + mss <= s["snd_wnd"]
        return (s["notsent_bytes"] < mss and s["wmem_queued"] >= FULL_SEND_BUFFER * s["sndbuf"]
                and s["unacked"] < s["snd_cwnd"] and window_room)

    return sum(map(bound, usable)) / len(usable)
