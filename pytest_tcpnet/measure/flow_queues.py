"""How many per-flow queues a path's fq_codel served at once while a measurement ran.

fq_codel hashes each flow into one of its queues (1024 by default); two flows that hash into one
share it as a FIFO, and neither gets the half a per-flow queue would give it (about one pair in
1024). Its class dump lists the queues that hold packets, so the most it listed at once, read
every INTERVAL_S, says how many queues the flows met (docs/reports.md, "Verdicts you can trust").
"""

import threading

from ..errors import LabError

__all__ = ["FlowQueueWatch", "INTERVAL_S"]

#: Seconds between reads: a few netlink messages each, cheap beside the flows even in an emulated guest.
INTERVAL_S = 0.1


class FlowQueueWatch:
    """Reads pair.flow_queue_counts() every INTERVAL_S from a thread, from start() to close(); most() is the most
    queues each interface listed at once ({} for a path without fq_codel: nothing is read)."""

    def __init__(self, pair) -> None:
        self._pair = pair
        self._most: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = None
        self._failure = None

    def start(self):
        """Start reading (nothing to read on a path without fq_codel)."""
        first = self._pair.flow_queue_counts()
        if first:
            self._most = dict(first)
            self._thread = threading.Thread(target=self._watch, name="tcpnet-flow-queues", daemon=True)
            self._thread.start()
        return self

    def _watch(self):
        try:
            while not self._stop.wait(INTERVAL_S):
                for ifname, count in self._pair.flow_queue_counts().items():
                    self._most[ifname] = max(count, self._most.get(ifname, 0))
        except BaseException as exc:  # reported by most(): a reading that failed part way says nothing
            self._failure = exc

    def close(self):
        """Stop reading (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def most(self):
        """{ifname: the most per-flow queues it listed at once} (reading stops); LabError if a read failed."""
        self.close()
        if self._failure is not None:
            raise LabError(f"reading fq_codel's per-flow queues failed: {self._failure}") from self._failure
        return dict(self._most)
