"""Where a guest's output goes and what stops it: one guest writes to the terminal; guests side by side
(``--tcpnet-vm-jobs``) each write to a relay, the first live and each next one from when the one before it ended,
so the terminal reads as if they had run one after the other."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Callable

from .errors import EXIT_INTERNAL_ERROR, EXIT_INTERRUPTED, VMError

# This thread's guest: its output streams and the event that stops it (unset: the terminal, signals).
_local = threading.local()


def say(message: str) -> None:
    """Print one ``tcpnet-vm:`` line to the host's stderr (this guest's, with guests side by side)."""
    stream = getattr(_local, "err", None) or sys.stderr
    stream.write(f"tcpnet-vm: {message}\n")
    stream.flush()


def streams() -> tuple:
    """This thread's guest's stdout and stderr (None, None: the terminal's)."""
    return getattr(_local, "out", None), getattr(_local, "err", None)


def abort_event() -> threading.Event | None:
    """The event that stops this thread's guest as Ctrl-C would (None: the main thread, which signals reach)."""
    return getattr(_local, "abort", None)


class _Relay:
    """One guest's stdout and stderr, in the order written: kept until its turn, then passed on as it comes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: list = []
        self._live = False

    def stream(self, name: str) -> _RelayStream:
        return _RelayStream(self, name)

    def write(self, name: str, text: str) -> None:
        with self._lock:
            if self._live:
                _emit(name, text)
            else:
                self._kept.append((name, text))

    def go_live(self, heading: str) -> None:
        """Print the heading and everything kept; from now on, pass writes straight on."""
        with self._lock:
            _emit("out", heading)
            for name, text in self._kept:
                _emit(name, text)
            self._kept.clear()
            self._live = True


class _RelayStream:
    """A text stream that writes into a relay (what ``launch`` and ``say`` write to)."""

    def __init__(self, relay: _Relay, name: str) -> None:
        self._relay, self._name = relay, name

    def write(self, text: str) -> int:
        self._relay.write(self._name, text)
        return len(text)

    def flush(self) -> None:
        pass


def _emit(name: str, text: str) -> None:
    stream = sys.stdout if name == "out" else sys.stderr
    stream.write(text)
    stream.flush()


class _Stopped(Exception):
    """SIGTERM or SIGHUP reached the runner while guests ran side by side."""


def _raise_stopped(_signum, _frame):
    raise _Stopped


def side_by_side(runs: list, at_once: int, heading: Callable[[int], str]) -> list:
    """Call each of ``runs`` (functions that boot one guest and return its exit code) in a thread of its own, at
    most ``at_once`` at a time, in order; return their exit codes.

    Run k's output goes to the terminal from when run k-1 ended, under ``heading(k)``. Ctrl-C, SIGTERM or SIGHUP
    stops every guest (each thread's ``launch`` sees the abort event); runs stopped or never started return
    EXIT_INTERRUPTED. A run's VMError is said in its output and returns its exit code.
    """
    abort = threading.Event()
    relays = [_Relay() for _ in runs]
    codes = [EXIT_INTERRUPTED] * len(runs)
    ended = [threading.Event() for _ in runs]

    def work(k: int) -> None:
        _local.out, _local.err, _local.abort = relays[k].stream("out"), relays[k].stream("err"), abort
        try:
            codes[k] = runs[k]()
        except VMError as err:
            say(f"error: {err}")
            codes[k] = err.exit_code
        except Exception as err:  # a bug: said where the user reads this guest's output, the others go on
            say(f"error: the runner failed: {type(err).__name__}: {err}")
            codes[k] = EXIT_INTERNAL_ERROR
        finally:
            ended[k].set()

    threads = [threading.Thread(target=work, args=(k,), name=f"tcpnet-vm-{k}", daemon=True) for k in range(len(runs))]
    started, shown = 0, 0
    old = {sig: signal.signal(sig, _raise_stopped) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        relays[0].go_live(heading(0))
        while shown < len(runs):
            running = sum(1 for t in threads[:started] if t.is_alive())
            while started < len(runs) and running < at_once:
                threads[started].start()
                started, running = started + 1, running + 1
            if ended[shown].wait(0.2):
                shown += 1
                if shown < len(runs):
                    relays[shown].go_live(heading(shown))
    except (KeyboardInterrupt, _Stopped):
        abort.set()
        say(f"interrupted; stopping {sum(1 for t in threads[:started] if t.is_alive())} guest(s)")
        for thread in threads[:started]:
            thread.join()
        for k in range(shown + 1, len(runs)):
            relays[k].go_live(heading(k))
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    return codes
