"""What limited a sender, from the kernel's chrono counters in TCP_INFO (busy, rwnd-limited, sndbuf-limited)."""

__all__ = ["limited_by"]


def limited_by(tcp_info):
    """('rwnd'|'sndbuf'|'cwnd'|'app', {label: share of busy time}) from a final TCP_INFO."""
    busy = tcp_info.get("busy_time") or 0
    rwnd = tcp_info.get("rwnd_limited") or 0
    sndbuf = tcp_info.get("sndbuf_limited") or 0
    if busy <= 0:
        return "app", {"app": 1.0}
    # busy_time counts all three states; the rest of it the sender was limited by cwnd (or pacing).
    shares = {"rwnd": rwnd / busy, "sndbuf": sndbuf / busy, "cwnd": max(0.0, (busy - rwnd - sndbuf) / busy)}
    return max(shares, key=shares.get), shares
