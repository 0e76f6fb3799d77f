"""One start for every flow of a measurement: their programs start one after another, their data moves at once."""

import os
import shutil
import tempfile

__all__ = ["StartGate"]


class StartGate:
    """A FIFO each flow's sender blocks on, opening it to read, until the measurement opens it to write.

    Starting a workload forks its programs and waits for each to listen: a fork costs ~126 ms in a User-Mode Linux
    guest, so the second pair of a dumbbell started 0.26-1.44 s after the first (12 runs) where both were asked to
    start at once. A reader's open() of a FIFO waits for a writer (fifo(7)); opening it read-write never waits
    and releases every waiting reader at once, and any later one at once too.
    """

    def __init__(self):
        self._dir = tempfile.mkdtemp(prefix="tcpnet-gate-")
        self.path = os.path.join(self._dir, "start")
        os.mkfifo(self.path, 0o600)
        self._fd = None

    def open(self):
        """Let every flow go."""
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)

    def close(self):
        """Open it (a flow still waiting goes, and is stopped as its workload is), then remove it."""
        self.open()
        os.close(self._fd)
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
