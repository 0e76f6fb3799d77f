"""Sampling TCP_INFO and socket memory of every TCP socket in a pair's endpoints, from outside the applications.

The same series exist for our bulk flows, iperf3, curl and the HTTP server alike, on both ends.
"""

import gc
import os
import select
import socket
import threading
import time

from .. import interrupts
from ..errors import LabError
from ..model.validation import check_number
from ..netlink.diag import destroyed_sockets, watch_sockets
from ..records import SERIES_FIELDS, SKMEM_FIELDS, TCP_INFO_SERIES, SocketSample
from .lifecycle import connection_key, lifecycle_packets

__all__ = ["SocketSampler", "SocketSamples", "SharedSampler", "SERIES_FIELDS", "default_interval", "DEFAULT_CPU_BUDGET"]

_LISTEN = 10
_ALL_BUT_LISTEN = ((1 << 12) - 1) & ~(1 << _LISTEN)


#: The share of one CPU all sampler threads of this process may use together when the interval is
#: the default one: a sample costs Python (pyroute2 decoding), far more in an emulated guest, where
#: unbudgeted sampling took most of a vCPU and cut a flow's rate beside a busy host (docs/workloads.md,
#: "What a result measures").
DEFAULT_CPU_BUDGET = 0.25
#: CPU seconds each sampler thread may spend ahead of its share: a short flow's samples (docs/workloads.md).
SAMPLER_BURST_CPU_S = 0.05
_active = {"threads": 0}
_active_lock = threading.Lock()
#: Per thread: CPU seconds spent in garbage collections that thread happened to trigger.
_gc_cpu = threading.local()


def _count_gc_cpu(phase, info):
    """gc callback: add a collection's CPU time to the thread that ran it.

    A full collection of a long session's heap can hold the sampler thread that set it off for long;
    billed as sampling, it pushed that thread's next sample past the end of the transfer
    (docs/design.md, pitfall 18).
    """
    if phase == "start":
        _gc_cpu.started = time.thread_time()
    elif getattr(_gc_cpu, "started", None) is not None:
        _gc_cpu.spent = getattr(_gc_cpu, "spent", 0.0) + time.thread_time() - _gc_cpu.started
        _gc_cpu.started = None


def _gc_cpu_spent():
    """CPU seconds this thread has spent in garbage collections while any sampler ran."""
    return getattr(_gc_cpu, "spent", 0.0)


def default_interval(rtt_s):
    """A quarter of the RTT, kept within 5..100 ms (10 ms on an undelayed path): several samples per round trip
    without a Python thread competing with the flows for the CPU."""
    if not rtt_s:
        return 0.010
    return min(0.100, max(0.005, rtt_s / 4))


class SocketSamples:
    """Rows of SERIES_FIELDS per socket, keyed by (role, local (addr, port), remote (addr, port))."""

    def __init__(self, rows, interval, ccs=None, closed=None, lifecycle=None, packets=None):
        self.rows = rows
        self.interval = interval
        self._ccs = ccs or {}
        #: (role, local, remote) -> (monotonic time the kernel destroyed the socket, the time of the sample before
        #: that, its final TCP_INFO, every field): the socket's last row is then that final TCP_INFO.
        self.closed = closed or {}
        #: Why the lifecycle was not fully watched ("" when it was): sockets' destruction not watched (then a
        #: connection that opened and closed between two samples is not seen), or the kernel dropped some of the
        #: destructions or of the SYN, FIN and RST packets (then some connections' open or close times are missing).
        self.lifecycle = lifecycle or ""
        #: role -> (opened, closed): each connection's first SYN and last FIN or RST in that namespace, by
        #: connection_key (monotonic times the kernel stamped).
        self._packets = packets or {}

    def opened_and_closed(self, role, local, remote):
        """(monotonic time of the connection's first SYN, of its last FIN or RST) as seen in role's namespace; each
        None where no such packet was seen (it opened before the sampling began, or is still open)."""
        opened, closed = self._packets.get(role, ({}, {}))
        key = connection_key(local, remote)
        return opened.get(key), closed.get(key)

    def cc_of(self, key):
        """The congestion control sock_diag reported for a socket (role, local, remote); None if unknown."""
        return self._ccs.get(key)

    def series(self, role, local, remote, field):
        """[(monotonic time, value)] of one field of one socket (absent values skipped)."""
        column = SERIES_FIELDS.index(field)
        return [
            (t, values[column])
            for t, values in self.rows.get((role, tuple(local), tuple(remote)), [])
            if values[column] is not None
        ]

    def sockets(self, role=None):
        """The (role, local, remote) keys seen."""
        return [key for key in self.rows if role is None or key[0] == role]

    def relabelled(self, roles):
        """The samples of some of the sampled namespaces under other names: roles is {new name: sampled name}."""
        named = {old: new for new, old in roles.items()}

        def keyed(table):
            return {(named[key[0]], *key[1:]): value for key, value in table.items() if key[0] in named}

        return SocketSamples(
            keyed(self.rows),
            self.interval,
            keyed(self._ccs),
            keyed(self.closed),
            self.lifecycle,
            {new: self._packets[old] for new, old in roles.items() if old in self._packets},
        )


class SocketSampler:
    """One thread per namespace reading every TCP socket there every `interval` seconds until stopped.

    cpu_budget: None samples every `interval` whatever it costs (an interval the caller chose);
    a share of one CPU stretches the interval so that every sampler thread of the process
    together stays within it (each sample's cost measured as it is taken). families: the address
    families whose sockets are read (AF_INET, AF_INET6).
    """

    def __init__(self, namespaces, interval, cpu_budget=None, families=(socket.AF_INET,)):
        check_number("sample_interval", interval, 0, 10, low_open=True, must="in (0, 10] seconds")
        if cpu_budget is not None and not 0 < cpu_budget <= 1:
            raise ValueError(f"cpu_budget: must be a share of one CPU in (0, 1], or None, got {cpu_budget!r}")
        self.interval = interval
        self.cpu_budget = cpu_budget
        self.families = tuple(families)  # only the world's: each family costs a dump per sample
        self._namespaces = dict(namespaces)
        self._rows = {}
        self._ccs = {}
        self._closed = {}
        self._last_sample = {}  # role -> monotonic time of its last sample
        self._destroyed = {}  # role -> DestroyedSockets
        self._packets = {}  # role -> LifecyclePackets
        self._lifecycle = ""
        self._wake = None  # a pipe: stop() writes to it to wake the threads' select()
        self._stop = threading.Event()
        self._errors = []
        self._threads = []

    def start(self):
        """Start sampling; returns once every namespace has been sampled once."""
        self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        for role, namespace in self._namespaces.items():
            # Before the first sample, so no socket closes unwatched: its destruction carries its final TCP_INFO.
            try:
                self._destroyed[role] = destroyed_sockets(namespace, self.families)
            except LabError as exc:
                self._lifecycle = str(exc)
            try:
                self._packets[role] = lifecycle_packets(namespace)
            except LabError as exc:
                self._lifecycle = self._lifecycle or str(exc)
        waits = []
        for role, namespace in self._namespaces.items():
            opened = threading.Event()
            outcome = []

            def ready(error, opened=opened, outcome=outcome):
                outcome.append(error)
                opened.set()

            thread = threading.Thread(
                target=self._watch, args=(role, namespace, ready), daemon=True, name=f"tcpnet-sampler-{role}"
            )
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
        first = time.monotonic()
        next_at = [first]
        spent = [0.0]  # this thread's CPU seconds so far

        def sample(table):
            cpu, collecting = time.thread_time(), _gc_cpu_spent()
            try:
                self._record(role, table)
            except Exception as exc:  # reported by stop(): a sampler must not die silently
                self._errors.append(exc)
                return False
            if self._stop.is_set():
                return False
            next_at[0] += self.interval
            if self.cpu_budget:
                # A token bucket: this thread's share of the budget accrues from its start, plus a burst, so a
                # short flow keeps every sample (a per-sample rule took a short flow's samples, and with them its
                # limited-by verdict: docs/workloads.md) while a long one is held to the share on average.
                # The sample's own cost: a collection it set off is the process's, not sampling.
                spent[0] += max(0.0, time.thread_time() - cpu - (_gc_cpu_spent() - collecting))
                share = self.cpu_budget / max(1, _active["threads"])
                next_at[0] = max(next_at[0], first + (spent[0] - SAMPLER_BURST_CPU_S) / share)
            self._wait(role, next_at[0])
            return True  # after a stop, one more (final) sample is taken before the loop ends

        with _active_lock:
            _active["threads"] += 1
            if _count_gc_cpu not in gc.callbacks:  # only while sampling: every collection of the process calls it
                gc.callbacks.append(_count_gc_cpu)
        try:
            watch_sockets(namespace, sample, ready=ready)
        except Exception as exc:
            self._errors.append(exc)
        finally:
            with _active_lock:
                _active["threads"] -= 1
                if not _active["threads"] and _count_gc_cpu in gc.callbacks:
                    gc.callbacks.remove(_count_gc_cpu)

    def _wait(self, role, until):
        """Sleep until the next sample, or a stop; record each socket the kernel destroys meanwhile, as it goes."""
        destroyed, packets = self._destroyed.get(role), self._packets.get(role)
        waiting = [self._wake[0]] + [watch for watch in (destroyed, packets) if watch is not None]
        while not self._stop.is_set():
            # Past the deadline too (a sample slower than the interval, on a busy host), read what came: else a
            # socket destroyed meanwhile is missing from every sample until its destruction is read, at the stop.
            left = max(0.0, until - time.monotonic())
            ready, _, _ = select.select(waiting, [], [], left)
            if packets is not None and packets in ready:
                packets.read()
            if destroyed is not None and destroyed in ready:
                self._record_destroyed(role, destroyed)
            if not left:
                return

    def _record_destroyed(self, role, destroyed):
        for read_at, sock in destroyed.read():
            if sock["state"] == _LISTEN:
                continue
            key = (role, sock["local"], sock["remote"])
            self._rows.setdefault(key, []).append((read_at, self._values(sock)))
            self._closed.setdefault(key, (read_at, self._last_sample.get(role, read_at), sock["tcp_info"]))

    @staticmethod
    def _values(sock):
        info, skmem = sock["tcp_info"], sock["skmem"]
        return SocketSample._make([*(info.get(f) for f in TCP_INFO_SERIES), *(skmem.get(f) for f in SKMEM_FIELDS)])

    def _record(self, role, table):
        now = time.monotonic()
        self._last_sample[role] = now
        for sock in table.tcp_sockets(states=_ALL_BUT_LISTEN, families=self.families):
            key = (role, sock["local"], sock["remote"])
            if key in self._closed:
                continue  # destroyed already: what a dump still shows is its TIME_WAIT remnant
            self._rows.setdefault(key, []).append((now, self._values(sock)))
            if sock.get("cc") and key not in self._ccs:
                self._ccs[key] = sock["cc"]

    def stop(self):
        """Stop (after one last sample per namespace); return the SocketSamples."""
        self._stop.set()
        if self._wake is not None:
            try:
                os.write(self._wake[1], b"x")
            except OSError:
                pass  # woken already
        for thread in self._threads:
            thread.join()
        for role, destroyed in self._destroyed.items():
            self._record_destroyed(role, destroyed)  # those the kernel broadcast since the last sample
            if destroyed.overflowed:
                self._lifecycle = f"the kernel dropped some socket destructions in the {role} namespace (too many)"
            destroyed.close()
        self._destroyed.clear()
        opened_and_closed = {}
        for role, packets in self._packets.items():
            packets.read()
            if packets.dropped():
                self._lifecycle = f"the kernel dropped some connections' SYN, FIN or RST in the {role} namespace"
            opened_and_closed[role] = (packets.opened, packets.closed)
            packets.close()
        self._packets.clear()
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        if self._errors:
            raise self._errors[0]
        return SocketSamples(self._rows, self.interval, self._ccs, self._closed, self._lifecycle, opened_and_closed)


class SharedSampler:
    """One SocketSampler for every namespace the observations of one measurement watch, each read once per sample: a
    namespace several pairs share (a star's client) is not read once per pair, and each pair's view of it holds the
    same samples. The interval is the shortest any of them asked for; the CPU budget holds unless one chose its own.
    """

    def __init__(self, watches, families):
        """watches: (namespaces {role: namespace}, interval, cpu_budget) per observation that samples."""
        self._sampler = SocketSampler(
            {namespace: namespace for namespaces, _, _ in watches for namespace in namespaces.values()},
            min(interval for _, interval, _ in watches),
            None if any(budget is None for _, _, budget in watches) else DEFAULT_CPU_BUDGET,
            families=families,
        )
        self._started = False
        self._samples = None

    def start(self):
        """Start sampling every namespace; returns once each has been sampled once."""
        self._sampler.start()
        self._started = True
        return self

    def stop(self):
        """Stop sampling (after one last sample of each namespace), once; later calls do nothing."""
        if self._started and self._samples is None:
            self._samples = self._sampler.stop()

    def view(self, namespaces):
        """The samples of namespaces {role: namespace}, keyed by those roles (stops the sampling first)."""
        self.stop()
        return self._samples.relabelled(namespaces)
