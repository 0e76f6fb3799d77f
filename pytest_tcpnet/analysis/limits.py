"""What limited a sender: read from its sampled socket state, cross-checked with the kernel's chrono counters.

Each sample of the sender's socket says what held it back at that instant:
  - "app":    the application gave the kernel nothing more to send (nothing unsent, send buffer
              not full): a paced writer, a stop-and-wait protocol waiting for its own reply;
  - "rwnd":   data waits and the peer's window has no room for another segment (or, smaller than cwnd,
              room for fewer than three);
  - "cwnd":   data waits and the congestion window is full, or both windows have room but more
              is written than the congestion window holds (pacing, the path): the congestion
              control and the network;
  - "sndbuf": the send buffer is full and both windows have room for everything written, in
              flight or still waiting for the stack to send it: the buffer bounds what can be in
              flight.
The verdict is the label of most samples in the transfer.

The chrono counters (tcpi_busy_time, rwnd_limited, sndbuf_limited) are the kernel's own
timing, kept as a cross-check and as the fallback without samples. They cannot tell "cwnd"
from "app" on their own: busy time that is neither rwnd- nor sndbuf-limited is any time with
data in flight, so a stop-and-wait protocol reads as 100% busy, and a 4 KB receive window on an
undelayed path as mostly busy (its window opens and closes faster than the chrono switches:
docs/model.md, "Assertions"). And
the sndbuf state starts only when a transmission empties the write queue while the writer
already waits, which a writer of small blocking writes never meets.
"""

import math

__all__ = [
    "LABELS",
    "SAMPLE_FIELDS",
    "FULL_SEND_BUFFER",
    "MIN_SAMPLES",
    "limited_by",
    "classify_sample",
    "sample_shares",
    "chrono_shares",
]

LABELS = ("rwnd", "sndbuf", "cwnd", "app")

#: The sender's sampled fields a verdict reads (TCP_INFO and socket memory, as the sampler takes them).
SAMPLE_FIELDS = ("unacked", "snd_cwnd", "snd_wnd", "snd_mss", "notsent_bytes", "wmem_queued", "sndbuf")

#: A sample's send buffer counts as full from this share of SO_SNDBUF charged (truesize, not payload): above it
#: the kernel keeps a writer waiting for space asleep (sk_stream_write_space wakes it only once the free space is
#: at least half of what is queued, sk_stream_min_wspace: queued <= 2/3 of the buffer). A writer asleep there sits
#: just above it, so a higher threshold calls it "app" (docs/model.md, "Assertions").
FULL_SEND_BUFFER = 2 / 3

#: A peer's window with room for fewer segments than this, while data waits, is as good as full.
_NEARLY_FULL = 3

#: Fewer classified samples than this and the verdict falls back to the chrono counters.
MIN_SAMPLES = 3


def classify_sample(sample):
    """The label one sample of the sender's socket shows (see the module), or None if it lacks the fields."""
    unacked, cwnd = sample.get("unacked"), sample.get("snd_cwnd")
    queued, buffer = sample.get("wmem_queued"), sample.get("sndbuf")
    if unacked is None or cwnd is None or queued is None or not buffer:
        return None
    mss = sample.get("snd_mss") or 1448
    notsent = sample.get("notsent_bytes")
    waiting = notsent is not None and notsent >= mss
    full = queued >= FULL_SEND_BUFFER * buffer
    if not waiting and not full:
        return "app"
    window = sample.get("snd_wnd")
    # Data waits, the peer's window is the smaller of the two and has room for under three segments: it binds,
    # even at an instant when an ACK has just opened that room (a 4 KB window on an undelayed path opens and fills
    # faster than a sample can tell, and read "cwnd" beside a busy host: docs/model.md, "Assertions").
    if window is not None and (
        unacked * mss + mss > window
        or (waiting and window < cwnd * mss and window - unacked * mss < _NEARLY_FULL * mss)
    ):
        return "rwnd"
    if unacked >= cwnd:
        return "cwnd"
    # Data waits with room in both windows. If the buffer is full and all it holds fits the congestion window, the
    # buffer bounds what can be in flight and the stack (a CPU taken by other work, a pacing timer) is a moment behind:
    # a 16 KB SO_SNDBUF at 20 ms under UML beside a CPU hog read "cwnd" from 43% of its samples with a congestion
    # window of 60 segments over ~22 in flight (fresh-clone CI run 12), and bbr behind the same buffer half the time.
    if waiting and not (full and unacked + math.ceil(notsent / mss) <= cwnd):
        return "cwnd"
    return "sndbuf"


def sample_shares(samples):
    """({label: share of classified samples}, how many were classified); ({}, 0) without usable samples."""
    labels = [label for label in map(classify_sample, samples or ()) if label is not None]
    if not labels:
        return {}, 0
    return {label: labels.count(label) / len(labels) for label in LABELS}, len(labels)


def chrono_shares(tcp_info, duration_s=None):
    """{label: share of the transfer} from the chrono counters: busy time neither rwnd- nor sndbuf-limited is
    "cwnd", time not busy within duration_s is "app" (shares of busy time without it). ValueError without them."""
    missing = [k for k in ("busy_time", "rwnd_limited", "sndbuf_limited") if (tcp_info or {}).get(k) is None]
    if missing:
        raise ValueError(f"tcp_info: lacks {', '.join(missing)} (kernel older than 4.10?); cannot tell the limit")
    busy = tcp_info["busy_time"] / 1e6
    rwnd = tcp_info["rwnd_limited"] / 1e6
    sndbuf = tcp_info["sndbuf_limited"] / 1e6
    total = max(busy, duration_s or 0.0)
    if total <= 0:
        return {"rwnd": 0.0, "sndbuf": 0.0, "cwnd": 0.0, "app": 1.0}
    return {
        "rwnd": rwnd / total,
        "sndbuf": sndbuf / total,
        "cwnd": max(0.0, busy - rwnd - sndbuf) / total,
        "app": max(0.0, total - busy) / total,
    }


def limited_by(tcp_info, duration_s=None, samples=None):
    """(label, shares, basis): what bounded the sender most, every label's share, and what they were read from.

    samples: the sender's sampled rows within the transfer (dicts with SAMPLE_FIELDS); with at
    least MIN_SAMPLES of them classified, they decide and basis says "N samples". Otherwise
    the chrono counters of tcp_info decide (basis "chrono"; ValueError if it lacks them).
    """
    shares, count = sample_shares(samples)
    if count >= MIN_SAMPLES:
        return max(LABELS, key=shares.get), shares, f"{count} samples"
    shares = chrono_shares(tcp_info, duration_s)
    return max(LABELS, key=shares.get), shares, "chrono"
