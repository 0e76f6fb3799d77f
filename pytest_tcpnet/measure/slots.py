"""Machine-wide measurement slots, so concurrent xdist workers do not measure each other's CPU load.

A slot is an flock on a lock file; its holder writes its pid, start time and deadline into the
file, so a waiter can name who holds it and stop waiting for a holder that is dead (its lock
kept alive by an inherited descriptor) or hung past its own deadline.
"""

import contextlib
import fcntl
import os
import time
import warnings

from .. import guest, hostload, interrupts
from ..errors import LabError
from ..locks import open_lock_file
from ..netlink.ownership import owner_alive, process_start_ticks

__all__ = [
    "measuring",
    "idle_poll_wanted",
    "measurement_slot",
    "slot_count",
    "slot_holders",
    "slot_wait_s",
    "DEFAULT_SLOT_WAIT_S",
    "OVERDUE_GRACE_S",
]

#: Seconds a transfer may queue for a measurement slot before giving up (env TCPNET_SLOT_WAIT).
DEFAULT_SLOT_WAIT_S = 900.0
#: A holder this long past its declared deadline is hung: its slot is not waited for.
OVERDUE_GRACE_S = 60.0


def slot_wait_s():
    """How long to queue for a slot: $TCPNET_SLOT_WAIT seconds, else DEFAULT_SLOT_WAIT_S."""
    return _positive_env("TCPNET_SLOT_WAIT", DEFAULT_SLOT_WAIT_S, float, "seconds")


def slot_count():
    """N = $TCPNET_MEASUREMENT_SLOTS, default max(1, cores // 2): a bulk flow keeps two cores busy."""
    return _positive_env("TCPNET_MEASUREMENT_SLOTS", max(1, (os.cpu_count() or 2) // 2), int, "a count")


def _positive_env(name, default, kind, what):
    value = os.environ.get(name, "")
    try:
        number = kind(value) if value else default
    except ValueError:
        raise LabError(f"{name}: expected {what}, got {value!r}") from None
    if not number > 0:
        raise LabError(f"{name}: expected {what} > 0, got {value!r}")
    return number


#: A time-travel guest (--tcpnet-deterministic) starts every measurement on this grid of its clock.
TIME_GRID_S = 0.1


def start_on_time_grid():
    """In a time-travel guest, wait for the next TIME_GRID_S of its clock; elsewhere return at once.

    Whatever came before (pytest's collection, the files the project holds: each failed system call costs such a
    guest 1 us) moves its clock by microseconds, which flows sharing a queue would amplify into another run; from a
    grid point on, a measurement runs the same code from the same instant.
    """
    if not guest.time_travel():
        return
    grid_ns = round(TIME_GRID_S * 1e9)
    now_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    time.sleep((grid_ns - now_ns % grid_ns) / 1e9)


@contextlib.contextmanager
def measuring(pairs, hold_s=None):
    """A measurement's hold on the machine for the block: a slot (measurement_slot), and the idle CPUs kept polling
    (hostload.idle_cpus_polling) unless a pair's lab said not to (Lab(idle_poll=False)); yields whether they were."""
    with measurement_slot(slot_wait_s(), hold_s=hold_s), hostload.idle_cpus_polling(idle_poll_wanted(pairs)) as polled:
        yield polled


def idle_poll_wanted(pairs):
    """Whether a measurement of these pairs may keep idle CPUs polling: unless one's lab said not to."""
    return all(getattr(pair.lab, "idle_poll", True) for pair in pairs)


@contextlib.contextmanager
def measurement_slot(timeout, hold_s=None):
    """Hold one of N machine-wide measurement slots for the block; yields the slot's index.

    Slots are tried from the highest index down: a process configured with more slots than
    the machine's default (a test's child with 64) takes ones the default processes never
    use, so it cannot starve them. hold_s: how long the holder expects to need the slot (its
    transfer's timeout); a waiter stops waiting for it once it is OVERDUE_GRACE_S past that.
    """
    slots = slot_count()
    deadline = time.monotonic() + timeout
    ignored = set()
    while True:
        for slot in reversed(range(slots)):
            if slot in ignored:
                continue
            fd = open_lock_file(_name(slot))  # private dir, no symlinks followed
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                _write_holder(fd, hold_s)
                start_on_time_grid()
                yield slot
            finally:
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        holders = slot_holders(slots)
        stale = {slot for slot, holder in holders.items() if holder.get("stale")} - ignored
        if stale:
            for slot in sorted(stale):
                warnings.warn(f"measurement slot {slot}: not waiting for {holders[slot]['why']}", stacklevel=3)
            ignored |= stale
            if len(ignored) == slots:
                # Every slot is held by the dead or the hung: measure without one rather than wait forever.
                yield None
                return
            continue
        if time.monotonic() > deadline:
            held = "; ".join(f"slot {slot}: {holder['why']}" for slot, holder in sorted(holders.items()))
            raise LabError(
                f"no measurement slot free within {timeout:.0f} s ({held}) "
                f"(TCPNET_SLOT_WAIT sets the wait, TCPNET_MEASUREMENT_SLOTS the count)"
            )
        interrupts.raise_dropped()
        time.sleep(0.01)


def _name(slot):
    return f"measurement-slot-{slot}.lock"


def _write_holder(fd, hold_s):
    """Record who holds the slot: pid, its start ticks (a reused pid is told apart), and its deadline."""
    until = "-" if hold_s is None else f"{time.time() + hold_s:.3f}"
    record = f"{os.getpid()} {process_start_ticks(os.getpid())} {time.time():.3f} {until}\n".encode()
    with contextlib.suppress(OSError):
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)


def slot_holders(slots=None):
    """{slot: {pid, since, why, stale}} for every slot that is held now (a free slot is absent)."""
    holders = {}
    for slot in range(slot_count() if slots is None else slots):
        fd = open_lock_file(_name(slot))
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                holders[slot] = _describe_holder(os.pread(fd, 200, 0).decode(errors="replace"))
            else:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return holders


def _describe_holder(text):
    try:
        pid, start, since, until = text.split()
        pid, start, since = int(pid), int(start), float(since)
        until = None if until == "-" else float(until)
    except ValueError:
        return {"pid": None, "since": None, "stale": False, "why": "a holder that recorded no pid (an older copy?)"}
    held = f"{time.time() - since:.0f} s"
    if not owner_alive(pid, start):
        return {
            "pid": pid,
            "since": since,
            "stale": True,
            "why": f"pid {pid}, which is dead, though a process that inherited its descriptor keeps the lock "
            f"(held {held})",
        }
    command = _command(pid)
    if until is not None and time.time() > until + OVERDUE_GRACE_S:
        return {
            "pid": pid,
            "since": since,
            "stale": True,
            "why": f"pid {pid} ({command}), {time.time() - until:.0f} s past its own deadline: hung",
        }
    return {"pid": pid, "since": since, "stale": False, "why": f"pid {pid} ({command}), held {held}"}


def _command(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120] or "?"
    except OSError:
        return "?"
