"""A measurement slot held by another thread, for tests of what waits for one."""

import contextlib
import threading

from pytest_tcpnet.measure.slots import measurement_slot


@contextlib.contextmanager
def slot_held_elsewhere(hold_s=10.0):
    """Hold a measurement slot from another thread for the block (or until `hold_s`, whichever ends first).

    Yields an Event: set it to release the slot early. Set TCPNET_MEASUREMENT_SLOTS=1 (and a
    private TCPNET_LOCK_DIR) first, so that this one slot is all there is.
    """
    held, release = threading.Event(), threading.Event()

    def holder():
        with measurement_slot(5):
            held.set()
            release.wait(hold_s)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert held.wait(5), "the holder never got the slot"
        yield release
    finally:
        release.set()
        thread.join()
