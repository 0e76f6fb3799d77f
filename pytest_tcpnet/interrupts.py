"""Interrupts that always interrupt: a KeyboardInterrupt the interpreter dropped is raised again by the next wait.

CPython runs a signal handler between two bytecodes of the main thread, whatever that thread
runs then. If it is a weakref callback or a ``__del__`` (importlib's module-lock callback during
a garbage collection, say), the KeyboardInterrupt the handler raises is reported as "Exception
ignored in ..." and dropped, and the main thread carries on into a wait that may last minutes.
Seen in CI: Ctrl-C during a transfer printed "Exception ignored in: <function
_get_module_lock.<locals>.cb>  KeyboardInterrupt" and the transfer ran on (docs/safety.md,
"Ctrl-C that the interpreter drops").

install() keeps what the interpreter drops (sys.unraisablehook; the previous hook still runs),
and every blocking wait of the plugin goes through wait()/result(), which wake at least every
SLICE_S and raise a dropped interrupt again (SIGTERM too: the session turns it into a
KeyboardInterrupt).
"""

import concurrent.futures
import sys
import threading
import time

__all__ = ["SLICE_S", "install", "raise_dropped", "wait", "result"]

#: The longest a plugin wait sleeps before looking for a dropped interrupt.
SLICE_S = 0.25

_dropped: list = []
_lock = threading.Lock()


def install():
    """Keep KeyboardInterrupt and SystemExit the interpreter reports as unraisable (idempotent)."""
    current = sys.unraisablehook
    if getattr(current, "_tcpnet_keeps_interrupts", False):
        return

    def hook(unraisable, previous=current):
        if isinstance(unraisable.exc_value, (KeyboardInterrupt, SystemExit)):
            with _lock:
                _dropped.append(unraisable.exc_value)
        previous(unraisable)

    hook._tcpnet_keeps_interrupts = True
    sys.unraisablehook = hook


def raise_dropped():
    """In the main thread, raise (once) an interrupt the interpreter dropped since the last call."""
    if not _dropped or threading.current_thread() is not threading.main_thread():
        return
    with _lock:
        dropped = _dropped[0] if _dropped else None
        _dropped.clear()
    if dropped is not None:
        raise dropped.with_traceback(None)


def wait(ready, timeout=None):
    """Call ready(seconds) with slices of at most SLICE_S until it returns true (-> True) or `timeout`
    seconds have passed (-> False; None: no limit); a dropped interrupt is raised between slices."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        raise_dropped()
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return bool(ready(0))
        if ready(SLICE_S if remaining is None else min(SLICE_S, remaining)):
            return True


def result(future, timeout=None):
    """future.result(timeout), waiting in slices (see wait); concurrent.futures.TimeoutError after `timeout`."""
    if not wait(lambda seconds: not concurrent.futures.wait([future], seconds).not_done, timeout):
        raise concurrent.futures.TimeoutError()
    return future.result(0)
