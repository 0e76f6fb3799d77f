"""Machine-wide measurement slots, so concurrent xdist workers do not measure each other's CPU load."""

import contextlib
import fcntl
import os
import time

from ..errors import LabError
from ..locks import open_lock_file

__all__ = ["measurement_slot"]

@contextlib.contextmanager
def measurement_slot(timeout):
    """Hold one of N machine-wide measurement slots (flock), so xdist workers don't measure each other's CPU load.

    N = TCPNET_MEASUREMENT_SLOTS, default max(1, cores // 2): a bulk flow keeps a sender and a
    receiver busy, one core each (DESIGN pitfall 5).
    """
    slots = int(os.environ.get("TCPNET_MEASUREMENT_SLOTS", max(1, (os.cpu_count() or 2) // 2)))
    deadline = time.monotonic() + timeout
    while True:
        for slot in range(slots):
            fd = open_lock_file(f"measurement-slot-{slot}.lock")  # private dir, no symlinks followed
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield slot
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        if time.monotonic() > deadline:
            raise LabError(f"no measurement slot free within {timeout:.0f} s")
        time.sleep(0.01)
