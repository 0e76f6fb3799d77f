"""Observe whatever runs on a pair: every TCP connection between its endpoints, whoever opened it.

`pair.observe()` holds a measurement slot, reads the path's counters before and after, samples
TCP_INFO and socket memory of every TCP socket in the client and server namespaces (sock_diag,
both ends, matched by 4-tuple) and, with capture=True, captures at both endpoints; each
connection's capture is the one taken at the end that sent its data, decided from the bytes each
end sent. Every connection becomes a TransferResult, registered with the lab like a built-in
flow's. What sampling can miss is said in docs/your-application.md.
"""

import contextlib
import functools
import math
from dataclasses import dataclass

from .. import hostload, netlink
from ..errors import LabError
from ..model.validation import is_number, refuse
from ..netlink.diag import tcp_counters
from ..records import ConnectionEnd, SocketSample
from ..results import TransferResult
from .flow_queues import FlowQueueWatch
from .sampler import DEFAULT_CPU_BUDGET, SharedSampler, SocketSampler, default_interval
from .slots import measuring

__all__ = ["Observation", "PathCounters", "TCP_SYSCTLS", "Endpoints", "endpoint_conditions"]

#: Sysctls recorded with every result: the ones that change what TCP does on a path.
TCP_SYSCTLS = (
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_window_scaling",
    "net.ipv4.tcp_adv_win_scale",
    "net.ipv4.tcp_moderate_rcvbuf",
    "net.ipv4.tcp_sack",
    "net.ipv4.tcp_timestamps",
    "net.ipv4.tcp_ecn",
    "net.ipv4.tcp_notsent_lowat",
    "net.ipv4.tcp_autocorking",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.ipv4.tcp_no_metrics_save",
    "net.ipv4.tcp_limit_output_bytes",
    "net.ipv4.tcp_shrink_window",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.core.rmem_default",
    "net.core.wmem_default",
)


@dataclass(frozen=True)
class Endpoints:
    """The kernel and both ends' sysctls a measurement ran under: what every result kind records of its endpoints."""

    kernel: str
    #: {"client": {name: value}, "server": {...}}: TCP_SYSCTLS and those the pair's Hosts set.
    sysctls: dict


def endpoint_conditions(pair) -> Endpoints:
    """The one reading of a pair's endpoint conditions, for a flow's result and a workload's own alike."""
    return Endpoints(
        kernel=netlink.kernel_release(),
        sysctls={
            "client": pair.client.sysctls(TCP_SYSCTLS + tuple(pair.client_host.sysctls)),
            "server": pair.server.sysctls(TCP_SYSCTLS + tuple(pair.server_host.sysctls)),
        },
    )


_FIN_RECEIVED = (8, 9, 11)  # TCP_CLOSE_WAIT, TCP_LAST_ACK, TCP_CLOSING
_FIN_QUEUED = (4, 9, 11)  # TCP_FIN_WAIT1, TCP_LAST_ACK, TCP_CLOSING: close() has added our FIN to the queue


class PathCounters:
    """The router's qdisc counters, the veths' counters and each end's TCP MIB, before and after a measurement, and
    the most per-flow queues each fq_codel on the path served at once between (FlowQueueWatch)."""

    def __init__(self, pair):
        self.pair = pair
        self.before = self._read()
        self.after = None
        self.host_before, self.host_after = hostload.host_snapshot(), None
        self._queues = FlowQueueWatch(pair).start()
        self.flow_queues = {}

    def close(self):
        """Stop watching the per-flow queues (idempotent): a measurement that failed reads nothing after."""
        self._queues.close()

    def _read(self):
        pair = self.pair
        return (
            pair.router_qdisc_stats(),
            pair.interface_counters(),
            {role: tcp_counters(node.namespace) for role, node in (("client", pair.client), ("server", pair.server))},
        )

    def stop(self):
        """Read the counters after."""
        self.flow_queues = self._queues.most()
        self.after = self._read()
        self.host_after = hostload.host_snapshot()

    def conditions(self):
        """The TransferResult fields every flow of the measurement shares: conditions and counter deltas."""
        pair = self.pair
        (stats_before, counters_before, mib_before), (stats_after, counters_after, mib_after) = self.before, self.after
        endpoints = endpoint_conditions(pair)
        return dict(
            tcp_counters={
                role: {
                    k: v - mib_before[role].get(k, 0)
                    for k, v in mib_after[role].items()
                    if v != mib_before[role].get(k, 0)
                }
                for role in mib_after
            },
            kernel=endpoints.kernel,
            link=pair.link,
            client=pair.client_host,
            server=pair.server_host,
            sysctls=endpoints.sysctls,
            offloads=dict(pair.offloads),
            qdiscs=_stats_delta(stats_before, stats_after),
            flow_queues=self.flow_queues,
            interfaces={
                end: {k: v - counters_before[end][k] for k, v in counts.items()}
                for end, counts in counters_after.items()
            },
            host_contention_cpus=hostload.others_cpus(self.host_before, self.host_after),
            host_steal_cpus=hostload.steal_cpus(self.host_before, self.host_after),
            host_steal_surely_cpus=hostload.surely_stolen_cpus(self.host_before, self.host_after),
            sibling_cpus=hostload.siblings_cpus(self.host_before, self.host_after),
            shaped_ways=pair.shaped_ways,
            shaper_burst_s=netlink.shaper_burst_s(),
            host_limit=getattr(pair.lab, "host_limit", None),
        )


class Observation:
    """One measurement of whatever runs on a pair (see the module); the built-in workloads run inside one too.

    capture: False, True (both ends: each connection gets the capture of the end that sent its
    data) or a node role ("client", "router", "server": that node only). sample_interval:
    seconds between socket samples (None: fit to the RTT; 0: none, for workloads that need no
    samples). hold_s: how long the measurement may hold its slot (a waiter stops waiting for a
    holder well past it). connections=True makes `flows` from the sampled connections and
    registers them with the lab (pair.observe()); the built-in workloads make their own results
    from what their programs reported and hand them to register(). take_slot=False: the caller
    holds the slot already (one measurement of several pairs at once holds one for all).
    """

    def __init__(
        self,
        pair,
        *,
        capture=False,
        sample_interval=None,
        hold_s=None,
        connections=True,
        app_window_bytes=None,
        take_slot=True,
        link_changes=True,
    ):
        if capture not in (False, True, "client", "router", "server"):
            raise ValueError(
                f"capture: must be True, False or a node role 'client', 'router', 'server', got {capture!r}"
            )
        self.cpu_budget = None  # an interval the caller chose is kept whatever it costs
        if sample_interval is None:
            sample_interval = default_interval(pair.link.rtt_s)
            self.cpu_budget = DEFAULT_CPU_BUDGET
        if not is_number(sample_interval) or not 0 <= sample_interval <= 10 or (connections and not sample_interval):
            refuse("sample_interval", f"in (0, 10] seconds{'' if connections else ', or 0 for none'}", sample_interval)
        self.pair = pair
        self.capture = capture
        self.sample_interval = sample_interval
        self.hold_s = hold_s
        self.connections = connections
        self.app_window_bytes = app_window_bytes
        self.take_slot = take_slot
        self.flows = None
        self.samples = None
        self.captures = {}
        self.shared = None
        self._stack = None
        self._sampler = None
        #: A SharedSampler of the measurement this observation is part of (set before entering), or None: its own.
        self.shared_sampler = None
        self.link_changes = link_changes  # False: another observation of the same world applies them
        self._changes = None
        self._counters = None
        self.applied_changes = []
        self.schedule_origin = None
        #: Whether idle CPUs were kept polling while it ran (slots.measuring; set by whoever holds the slot).
        self.cpus_polled = None

    def __enter__(self):
        pair = self.pair
        if pair.closed:
            raise LabError("this pair is closed")
        if getattr(pair, "_observing", False):
            raise LabError(
                "this pair is already being observed: observe() blocks do not nest on one pair, "
                "and a workload on it would be measured twice"
            )
        pair._observing = True
        stack = contextlib.ExitStack()
        try:
            stack.callback(setattr, pair, "_observing", False)
            if self.take_slot:
                # Waiting for a slot is queueing behind other sessions' transfers, not this measurement's time.
                self.cpus_polled = stack.enter_context(measuring([pair], hold_s=self.hold_s))
            self._counters = PathCounters(pair)
            stack.callback(self._counters.close)
            if self.sample_interval and self.shared_sampler is not None:
                stack.callback(self._take_shared_samples)
            elif self.sample_interval:
                self._sampler = SocketSampler(
                    self.namespaces, self.sample_interval, self.cpu_budget, families=pair.world.socket_families
                ).start()
                stack.callback(self._stop_sampler)
            if self.capture:
                self._start_captures(stack)
            if self.link_changes:
                self._start_changes(stack)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def _start_captures(self, stack):
        from ..capture import Capture

        pair = self.pair
        roles = ("client", "server") if self.capture is True else (self.capture,)
        started = {}
        stack.push(functools.partial(self._stop_captures, started))
        for role in roles:
            capture = Capture(
                getattr(pair, role),
                filter=f"tcp and host {pair.client.address} and host {pair.server.address}",
                directory=pair.lab.artifact_dir,
            )
            capture.start()
            started[role] = capture

    def _stop_captures(self, started, exc_type, exc, tb):
        """Stop the captures, each after its settle unless interrupted; never let theirs hide the block's error.

        Ctrl-C or SIGTERM does not wait for pcaps nobody will read: the two captures' settles held an
        interrupted transfer ~1 s. A capture that fails to stop while the block's own error is on
        its way out must not replace it.
        """
        from ..capture import SETTLE_S

        interrupted = exc_type is not None and issubclass(exc_type, (KeyboardInterrupt, SystemExit))
        errors = []
        for role, capture in reversed(started.items()):  # last started, first stopped, as before
            try:
                self.captures[role] = capture.stop(settle=0 if interrupted else SETTLE_S)
            except LabError as error:
                errors.append(error)
        if errors and exc_type is None:
            raise errors[0]
        return False

    def _start_changes(self, stack):
        from .changes import LinkChanges

        changes = LinkChanges(self.pair.world)
        if changes:
            # Last in, so first out: the link stops changing before the sampler's and captures' last reads.
            self._changes = changes.start()
            self.schedule_origin = changes.origin
            stack.callback(self._stop_changes)

    def _stop_changes(self):
        self.applied_changes = self._changes.stop()

    def _stop_sampler(self):
        self.samples = self._sampler.stop()

    def _take_shared_samples(self):
        self.samples = self.shared_sampler.view(self.namespaces)

    @property
    def namespaces(self):
        """{role: namespace} of the two ends this observation samples."""
        return {"client": self.pair.client.namespace, "server": self.pair.server.namespace}

    @property
    def watch(self):
        """What a SharedSampler needs of this observation: (namespaces, interval, cpu budget)."""
        return self.namespaces, self.sample_interval, self.cpu_budget

    def __exit__(self, exc_type, exc, tb):
        try:
            # Captures, then the sampler (its last sample), then the slot; each told how the block ended.
            self._stack.__exit__(exc_type, exc, tb)
        finally:
            self._stack = None
        if exc_type is not None:
            return False
        self._counters.stop()
        self.shared = dict(
            self._counters.conditions(),
            link_changes=self.applied_changes,
            schedule_origin=self.schedule_origin,
            cpus_polled=self.cpus_polled,
        )
        if self.connections:
            self.flows = connection_results(
                self.samples,
                self.captures,
                self.shared,
                artifact_dir=self.pair.lab.artifact_dir,
                app_window_bytes=self.app_window_bytes,
            )
            self.register(self.flows)
        return False

    @property
    def steal_reading(self):
        """(the hypervisor's steal while this observation ran, counted low: hostload.surely_stolen_cpus, over how
        many seconds), or None: not ended, or unknown."""
        counters = self._counters
        if counters is None or counters.host_after is None:
            return None
        stolen = hostload.surely_stolen_cpus(counters.host_before, counters.host_after)
        return None if stolen is None else (stolen, counters.host_after["at"] - counters.host_before["at"])

    def capture_for(self, sender_role, local=None, remote=None):
        """The capture of a connection whose data `sender_role` sent: the sender's end's (or the one node
        asked for), restricted to that connection's packets when its addresses are known; None without one."""
        capture = self.captures.get(sender_role) if self.capture is True else self.captures.get(self.capture)
        if capture is not None and local is not None and remote is not None:
            capture = capture.for_connection(local, remote)
        return capture

    def register(self, results):
        """Keep results with the lab: the session table, JUnit properties, results files and failure artifacts."""
        self.pair.lab.register(*results)


class TopologyObservation:
    """observe() on a star or dumbbell: an Observation of each pair inside one measurement slot. `flows` holds every
    pair's connections (a connection between a pair's client and server is that pair's alone: each once), largest
    first; on a dumbbell (bottleneck: its Link) the flows that ran beside each other get their shares of it."""

    def __init__(self, pairs, *, capture=False, sample_interval=None, app_window_bytes=None, bottleneck=None):
        from .changes import LinkChanges

        if LinkChanges(pairs[0].world):
            raise LabError(
                "observe() on a topology whose links change (a Schedule) is not supported: each pair would apply "
                "the changes; observe one pair (topology.pairs[i].observe()) or run flows with concurrent()"
            )
        self.observations = [
            Observation(
                pair,
                capture=capture,
                sample_interval=sample_interval,
                app_window_bytes=app_window_bytes,
                take_slot=False,
                link_changes=False,
            )
            for pair in pairs
        ]
        self.bottleneck = bottleneck
        self.flows = None
        self._stack = None

    def __enter__(self):
        stack = contextlib.ExitStack()
        try:
            polled = stack.enter_context(measuring([observation.pair for observation in self.observations]))
            for observation in self.observations:
                observation.cpus_polled = polled
            share_sampling(self.observations, stack)
            for observation in self.observations:
                stack.enter_context(observation)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            self._stack.__exit__(exc_type, exc, tb)
        finally:
            self._stack = None
        if exc_type is not None:
            return False
        flows = [flow for observation in self.observations for flow in observation.flows]
        if self.bottleneck is not None:
            flows = self.observations[0].pair.lab.share(flows, [], self.bottleneck)
        self.flows = sorted(flows, key=lambda flow: flow.nbytes, reverse=True)
        return False


def share_sampling(observations, stack):
    """Give the observations of one measurement that sample one SharedSampler, started now and stopped by the stack
    (or by the first of them to end): a namespace they share is read once per sample."""
    watching = [observation for observation in observations if observation.sample_interval]
    if not watching:
        return
    families = tuple(dict.fromkeys(f for observation in watching for f in observation.pair.world.socket_families))
    sampler = SharedSampler([observation.watch for observation in watching], families)
    for observation in watching:
        observation.shared_sampler = sampler
    sampler.start()
    stack.callback(sampler.stop)


def connection_results(samples, captures, shared, *, artifact_dir, app_window_bytes=None):
    """One TransferResult per TCP connection between the client and the server namespaces, largest first."""
    results = []
    for role, local, remote in list(samples.rows):
        if role != "client":
            continue
        peer = samples.rows.get(("server", remote, local))
        if not peer:
            continue  # not a connection between the two ends (or the server side was never seen)
        ends = {
            end_role: _end(
                samples.rows[(end_role, end_local, end_remote)],
                end_local,
                end_remote,
                samples.cc_of((end_role, end_local, end_remote)),
                samples.closed.get((end_role, end_local, end_remote)),
                samples.opened_and_closed(end_role, end_local, end_remote),
            )
            for end_role, end_local, end_remote in (("client", local, remote), ("server", remote, local))
        }
        sent = {
            role: _sent_by(ends[role], ends[peer_role])
            for role, peer_role in (("client", "server"), ("server", "client"))
        }
        sender_role = "server" if sent["server"] >= sent["client"] else "client"
        receiver_role = "client" if sender_role == "server" else "server"
        sender, receiver = ends[sender_role], ends[receiver_role]
        both = {
            role: found.for_connection(ends[role].local, ends[role].remote)
            for role, found in captures.items()
            if found is not None
        }
        capture = captures.get(sender_role)
        total = sent[sender_role]
        if capture is not None:
            capture = capture.for_connection(sender.local, sender.remote)
            # The packets count every byte exactly; samples miss what moved after the last one before the sockets
            # closed, and a receiver's sample can count the FIN while its state still reads ESTABLISHED (seen).
            if not sender.final:  # the sender's final TCP_INFO is exact too, and a capture can drop packets
                total = capture.data_bytes or total
        results.append(
            TransferResult(
                nbytes=total,
                direction="download" if sender_role == "server" else "upload",
                sender=_sender_record(sender),
                receiver=_receiver_record(receiver, total),
                sender_role=sender_role,
                workload="observed",
                samples=samples,
                capture=capture,
                artifact_dir=artifact_dir,
                app_window_bytes=app_window_bytes,
                rcvbuf_requested=set_rcvbuf(receiver.values, shared["sysctls"].get(receiver_role, {})),
                sent_bytes=dict(sent),
                captures=both,
                **shared,
            )
        )
    return sorted(results, key=lambda r: -r.nbytes)


def _sent_by(end, peer):
    """Payload bytes one end sent: exact from its final TCP_INFO where its destruction was watched; else the most its
    samples show written or its peer's show received (which can count the FIN: one byte over)."""
    if end.final:
        return (end.final.get("bytes_sent") or 0) - (end.final.get("bytes_retrans") or 0)
    return max(end.sent, peer.received)


def set_rcvbuf(values, sysctls):
    """The SO_RCVBUF the application set, inferred from its socket, or None (autotuned, or cannot tell).

    sock_diag does not say whether a buffer is locked, but an autotuned socket starts at
    tcp_rmem's default and grows as data comes, while one the application set stays at twice
    its request (capped at rmem_max) from connect to close: a buffer that never moved and is not
    the default was set, and the model needs the request. A request whose double is the default
    itself (64 KB on tcp_rmem's 128 KB) cannot be told from autotuning that never grew.
    """
    buffers = [v.rcvbuf for v in values if v.rcvbuf]
    try:
        default = int(str(sysctls.get("net.ipv4.tcp_rmem", "")).split()[1])
    except (IndexError, ValueError):
        return None
    if len(buffers) < 3 or len(set(buffers)) != 1 or buffers[0] == default:
        return None
    return buffers[0] // 2


def sampled_values(rows):
    """A socket's sampled rows as records.SocketSamples, in time order."""
    return [SocketSample._make(v) for _, v in rows]


def _end(rows, local, remote, cc, closed=None, packets=(None, None)):
    """What one end's samples say: times and values of the samples with TCP_INFO (a socket in TIME_WAIT, or
    closed, has none), bytes received, and bytes written (bytes_sent counts resends too: they are taken off).

    closed: the socket's SocketSamples.closed entry, if the kernel destroyed it while watched: its last row is then
    its final TCP_INFO (every byte counted), taken when it closed. packets: the kernel's stamps of the connection's
    first SYN and last FIN or RST in this end's namespace (None where not seen)."""
    full = list(zip((t for t, _ in rows), sampled_values(rows)))
    full = [(t, v) for t, v in full if v.state is not None] or full
    values = [v for _, v in full]
    closed_at, sample_before, final = closed or (None, None, None)
    # Written so far: sent at least once (bytes_sent counts payload, resends included), plus what still waits to
    # be sent (notsent_bytes, which holds our own FIN once close() queued it and it has not left yet).
    sent = max(((v.bytes_sent or 0) - (v.bytes_retrans or 0) + _unsent_payload(v) for v in values), default=0)
    # bytes_received counts the peer's FIN too, once it came (CLOSE_WAIT, LAST_ACK, CLOSING; and a destroyed
    # socket's final count, when it closed in the usual way).
    received = max((_data_received(v) for v in values), default=0)
    times = [t for t, _ in full]
    syn_at, fin_at = packets
    unsampled = closed_at is not None and times and times[0] >= closed_at
    return _SampledEnd(
        times=times,
        values=values,
        local=tuple(local),
        remote=tuple(remote),
        cc=cc,
        received=received,
        sent=sent,
        gone_at=rows[-1][0] if len(rows) > len(full) else None,
        closed_at=closed_at,
        final=final,
        # A connection no sample saw alive opened after the sample before its close; its SYN says exactly when.
        opened_at=(syn_at if syn_at is not None else sample_before) if unsampled else None,
        syn_at=syn_at,
        fin_at=fin_at,
    )


@dataclass(frozen=True)
class _SampledEnd:
    """What one end's samples say (_end): its rows with TCP_INFO, bytes each way, and the kernel's stamps."""

    times: list
    values: list
    local: tuple
    remote: tuple
    cc: "str | None"
    #: Payload bytes it received, and wrote (resends taken off).
    received: int
    sent: int
    #: When the socket was last seen gone (a sample without TCP_INFO), closed (its destruction watched: `final` is
    #: then its final TCP_INFO), opened (only for one no sample saw alive), and its SYN's and last FIN's stamps.
    gone_at: "float | None"
    closed_at: "float | None"
    final: "dict | None"
    opened_at: "float | None"
    syn_at: "float | None"
    fin_at: "float | None"


_TCP_CLOSE = 7


def _data_received(v):
    """Payload bytes a sample says arrived: bytes_received less the peer's FIN where the state says it came."""
    got = v.bytes_received or 0
    return got - (got > 0 and v.state in (*_FIN_RECEIVED, _TCP_CLOSE))


def _unsent_payload(v):
    notsent = v.notsent_bytes or 0
    return notsent - (notsent > 0 and v.state in _FIN_QUEUED)


def first_value(values, field):
    """The first sample's value of field that the kernel reported (None: none did)."""
    return next((getattr(v, field) for v in values if getattr(v, field) is not None), None)


def last_tcp_info(values):
    """The last sample's TCP_INFO with the chrono counters (a closed socket's last sample may lack them); no
    socket memory."""
    with_chrono = [v for v in values if v.busy_time is not None] or values
    return with_chrono[-1].tcp_info()


def _receiver_record(end, total):
    """The receiving end's record; `total` is what the sender sent, which may exceed what the receiver's last
    sample showed (its socket closed before the next sample, unwatched): the rest is placed at its last rate.

    A socket whose destruction was watched has its final count: its last byte came when its final TCP_INFO says
    (last_data_recv before the close, to the kernel's clock tick); one no sample saw alive is timed from the sample
    before its close (marked "between_samples": its rate is a lower bound)."""
    times, values = end.times, end.values
    got = [(t, min(total, _data_received(v))) for t, v in zip(times, values)]
    if got and got[-1][1] >= total:
        # Two bounds on the last byte, the earlier wins: the destruction's final TCP_INFO (last_data_recv before the
        # close) and the sender's FIN, which this namespace saw by fin_at (the destruction is read later: the kernel
        # broadcasts it from a work queue). Never before the checkpoints already seen, nor before the connection.
        bounds = [got[-1][0]]
        if end.closed_at is not None and end.final:
            bounds[0] = end.closed_at - (end.final.get("last_data_recv") or 0) / 1e3
        if end.fin_at is not None:
            bounds.append(end.fin_at)
        got[-1] = (max(min(bounds), end.opened_at or -math.inf, *(t for t, _ in got[:-1])), got[-1][1])
    first = next(((t, n) for t, n in got if n > 0), None)
    last = next((t for t, n in got if n >= total), None)
    if last is None:
        last = _extrapolated_end(got, total, end.gone_at)
        got.append((last, total))
    record = ConnectionEnd(
        nbytes=total,
        connected_at=end.opened_at if end.opened_at is not None else times[0],
        checkpoints=got,
        local=end.local,
        remote=end.remote,
        tcp_info=_final_tcp_info(end),
        buffers={"rcvbuf": first_value(values[::-1], "rcvbuf")},
        buffers_at_connect={"rcvbuf": first_value(values, "rcvbuf")},
        closed_at=end.closed_at,
        syn_at=end.syn_at,
        fin_at=end.fin_at,
        last_byte_at=times[-1],
    )
    if end.opened_at is not None:
        # No sample saw it alive: its bytes are timed from the sample before it closed, not from a first read.
        return record.replace(first_byte_at=end.opened_at, first_read=0, last_byte_at=last, between_samples=True)
    if first is not None:
        # The first sample with data stands for the first read: its bytes are not timed (as for a bulk flow). If it
        # shows them all, they came between two samples: nothing timed them.
        return record.replace(
            first_byte_at=first[0], first_read=first[1], last_byte_at=last, between_samples=first[1] >= total
        )
    return record


def _final_tcp_info(end):
    """The end's last TCP_INFO: the kernel's final one (every field) if its destruction was watched, else the last
    sample's."""
    if end.final:
        return {k: v for k, v in end.final.items() if v is not None}
    return last_tcp_info(end.values)


def _extrapolated_end(got, total, gone_at):
    """When the last `total - seen` bytes arrived, at the rate of the last samples (not after the socket was gone)."""
    (t0, n0), (t1, n1) = (got[-3] if len(got) >= 3 else got[0]), got[-1]
    rate = (n1 - n0) / (t1 - t0) if t1 > t0 and n1 > n0 else None
    end = t1 + (total - n1) / rate if rate else (gone_at or t1)
    return min(end, gone_at) if gone_at is not None else end


def _sender_record(end):
    """The sending end's record: its first write and when its last byte was acknowledged, where the samples show."""
    times, values = end.times, end.values
    started = next((i for i, v in enumerate(values) if (v.bytes_sent or 0) > 0 or v.notsent_bytes), None)
    acked = next(
        (t for t, v in zip(times, values) if (v.bytes_sent or 0) >= end.sent and not v.unacked and not v.notsent_bytes),
        end.gone_at or times[-1],
    )
    if end.final and acked == end.closed_at:
        # Acknowledged before it closed: its final TCP_INFO says when the last ACK came.
        acked = max(end.opened_at or -math.inf, acked - (end.final.get("last_ack_recv") or 0) / 1e3)
    opened = end.opened_at
    record = ConnectionEnd(
        connected_at=opened if opened is not None else times[0],
        local=end.local,
        remote=end.remote,
        tcp_info=_final_tcp_info(end),
        buffers={"sndbuf": first_value(values[::-1], "sndbuf"), "cc": end.cc},
        buffers_at_connect={"sndbuf": first_value(values, "sndbuf")},
        closed_at=end.closed_at,
        syn_at=end.syn_at,
        fin_at=end.fin_at,
    )
    if started is None:
        return record
    # The write happened after the sample before the first that shows data, and after the connection's SYN.
    bounds = [t for t in (times[started - 1] if started else None, end.syn_at) if t is not None]
    return record.replace(
        first_write_at=opened if opened is not None else max(bounds, default=times[0]), acked_at=acked
    )


def _stats_delta(before, after):
    """Per-qdisc counters accumulated during the run."""
    delta = {}
    for ifname, qdiscs in after.items():
        old = {(q["kind"], q["handle"]): q for q in before.get(ifname, [])}
        rows = []
        for q in qdiscs:
            prev = old.get((q["kind"], q["handle"]), {})
            rows.append({**q, **{k: q[k] - prev.get(k, 0) for k in ("packets", "bytes", "drops", "overlimits")}})
        delta[ifname] = rows
    return delta
