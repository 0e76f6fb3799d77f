"""Sampling TCP_INFO and socket memory of every TCP socket in a pair's endpoints, from outside the applications.

The same series exist for our bulk flows, iperf3, curl and the HTTP server alike, on both ends.
"""

import threading
import time

from .. import interrupts
from ..netlink.diag import SKMEM_FIELDS, watch_sockets

__all__ = ["SocketSampler", "SocketSamples", "SERIES_FIELDS", "default_interval"]

#: TCP_INFO fields kept per sample (the rest of the struct is in each end's final record).
TCP_INFO_SERIES = ("state", "ca_state", "retransmits", "probes", "backoff", "rto", "unacked", "lost", "retrans",
                   "rtt", "rttvar", "snd_ssthresh", "snd_cwnd", "rcv_ssthresh", "rcv_space", "snd_mss", "total_retrans",
                   "pacing_rate", "bytes_acked", "bytes_received", "bytes_sent", "notsent_bytes", "min_rtt",
                   "delivery_rate", "busy_time", "rwnd_limited", "sndbuf_limited", "snd_wnd", "rcv_wnd",
                   "bytes_retrans", "dsack_dups")
SERIES_FIELDS = TCP_INFO_SERIES + SKMEM_FIELDS
_LISTEN = 10
_ALL_BUT_LISTEN = ((1 << 12) - 1) & ~(1 << _LISTEN)


def default_interval(rtt_s):
    """A quarter of the RTT, kept within 5..100 ms (10 ms on an undelayed path): several samples per round trip
    without a Python thread competing with the flows for the CPU."""
    if not rtt_s:
        return 0.010
    return min(0.100, max(0.005, rtt_s / 4))


class SocketSamples:
    """Rows of SERIES_FIELDS per socket, keyed by (role, local (addr, port), remote (addr, port))."""

    def __init__(self, rows, interval, ccs=None):
        self.rows = rows
        self.interval = interval
        self._ccs = ccs or {}

    def cc_of(self, key):
        """The congestion control sock_diag reported for a socket (role, local, remote); None if unknown."""
        return self._ccs.get(key)

    def series(self, role, local, remote, field):
        """[(monotonic time, value)] of one field of one socket (absent values skipped)."""
        column = SERIES_FIELDS.index(field)
        return [(t, values[column]) for t, values in self.rows.get((role, tuple(local), tuple(remote)), [])
                if values[column] is not None]

    def sockets(self, role=None):
        """The (role, local, remote) keys seen."""
        return [key for key in self.rows if role is None or key[0] == role]


class SocketSampler:
    """One thread per namespace reading every TCP socket there every `interval` seconds until stopped."""

    def __init__(self, namespaces, interval):
        if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0 < interval <= 10:
            raise ValueError(f"sample_interval: must be in (0, 10] seconds, got {interval!r}")
        self.interval = interval
        self._namespaces = dict(namespaces)
        self._rows = {}
        self._ccs = {}
        self._stop = threading.Event()
        self._errors = []
        self._threads = []

    def start(self):
        """Start sampling; returns once every namespace has been sampled once."""
        waits = []
        for role, namespace in self._namespaces.items():
            opened = threading.Event()
            outcome = []

            def ready(error, opened=opened, outcome=outcome):
                outcome.append(error)
                opened.set()

            thread = threading.Thread(target=self._watch, args=(role, namespace, ready), daemon=True,
                                      name=f"tcpnet-sampler-{role}")
            thread.start()
            self._threads.append(thread)
            waits.append((opened, outcome))
        for opened, outcome in waits:  # every thread started first: their set-ups overlap
            interrupts.wait(opened.wait)
            if outcome[0] is not None:
                self.stop()
                raise outcome[0]
        return self

    def _watch(self, role, namespace, ready):
        next_at = [time.monotonic()]

        def sample(table):
            try:
                self._record(role, table)
            except Exception as exc:  # reported by stop(): a sampler must not die silently
                self._errors.append(exc)
                return False
            if self._stop.is_set():
                return False
            next_at[0] += self.interval
            self._stop.wait(max(0.0, next_at[0] - time.monotonic()))
            return True  # after a stop, one more (final) sample is taken before the loop ends

        try:
            watch_sockets(namespace, sample, ready=ready)
        except Exception as exc:
            self._errors.append(exc)

    def _record(self, role, table):
        now = time.monotonic()
        for sock in table.tcp_sockets(states=_ALL_BUT_LISTEN):
            info, skmem = sock["tcp_info"], sock["skmem"]
            values = tuple(info.get(f) for f in TCP_INFO_SERIES) + tuple(skmem.get(f) for f in SKMEM_FIELDS)
            key = (role, sock["local"], sock["remote"])
            self._rows.setdefault(key, []).append((now, values))
            if sock.get("cc") and key not in self._ccs:
                self._ccs[key] = sock["cc"]

    def stop(self):
        """Stop (after one last sample per namespace); return the SocketSamples."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        if self._errors:
            raise self._errors[0]
        return SocketSamples(self._rows, self.interval, self._ccs)
