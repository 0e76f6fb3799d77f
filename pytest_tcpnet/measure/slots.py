"""Machine-wide measurement slots, so concurrent xdist workers do not measure each other's CPU load."""

import contextlib
import fcntl
import os
import time

from ..errors import LabError
from ..locks import open_lock_file

__all__ = ["measurement_slot", "slot_wait_s", "DEFAULT_SLOT_WAIT_S"]

#: Seconds a transfer may queue for a measurement slot before giving up (env TCPNET_SLOT_WAIT).
DEFAULT_SLOT_WAIT_S = 900.0


def slot_wait_s():
    """How long to queue for a slot: $TCPNET_SLOT_WAIT seconds, else DEFAULT_SLOT_WAIT_S."""
    value = os.environ.get("TCPNET_SLOT_WAIT", "")
    try:
        wait = float(value) if value else DEFAULT_SLOT_WAIT_S
    except ValueError:
        raise LabError(f"TCPNET_SLOT_WAIT: expected seconds, got {value!r}") from None
    if not wait > 0:
        raise LabError(f"TCPNET_SLOT_WAIT: expected seconds > 0, got {value!r}")
    return wait


@contextlib.contextmanager
def measurement_slot(timeout):
    """Hold one of N machine-wide measurement slots (flock), so xdist workers don't measure each other's CPU load.

    N = TCPNET_MEASUREMENT_SLOTS, default max(1, cores // 2): a bulk flow keeps a sender and a
    receiver busy, one core each.
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
            raise LabError(f"no measurement slot free within {timeout:.0f} s: other transfers on this machine "
                           f"held all of them (TCPNET_SLOT_WAIT sets the wait, TCPNET_MEASUREMENT_SLOTS the count)")
        time.sleep(0.01)
