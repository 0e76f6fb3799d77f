"""The contract every workload adapter follows (bulk, iperf3, http, fake)."""

from dataclasses import dataclass, field

from ..model import transfer_time
from ..model.app import Cbr
from ..records import ConnectionEnd

__all__ = ["Workload", "FlowOutcome", "default_timeout", "flow_deadline"]

#: poll() takes at most ~24 days; no test should wait a day anyway.
_LONGEST_DEADLINE = 24 * 3600.0


@dataclass
class FlowOutcome:
    """What one flow of a workload reported: the sender's and receiver's ends (records.ConnectionEnd; a dict record
    in the workload's own terms becomes one, keys it does not know kept in `extra`).

    Records use the bulk flow's keys where they apply: nbytes, connected_at, first_byte_at,
    last_byte_at, checkpoints [(t, bytes)], pauses, buffers {sndbuf, rcvbuf, cc}, tcp_info,
    local/remote addresses. `reported_bps` is a tool's own average (iperf3, curl) when it has one.
    """

    sender: ConnectionEnd
    receiver: ConnectionEnd
    sender_role: str  # "client" or "server": which namespace sent the data
    spec: object = None  # the Flow (or the workload's own options) this outcome answers
    reported_bps: "float | None" = None
    details: dict = field(default_factory=dict)

    def __post_init__(self):
        # The one place a workload's record (a dict, from its process or its tool) becomes a typed end.
        self.sender = ConnectionEnd.from_record(self.sender)
        self.receiver = ConnectionEnd.from_record(self.receiver)

    @property
    def receiver_role(self):
        """The namespace that received the data: "client" when the server sent it, else "server"."""
        return "client" if self.sender_role == "server" else "server"


class Workload:
    """One kind of traffic on a pair: start it inside the pair's nodes, wait for it, stop it by pid.

    Subclasses check their options when constructed (before anything starts) and implement
    `start(pair, deadline)` (processes launched, servers listening), `wait(deadline) -> [FlowOutcome]`
    and `stop()` (idempotent; also called on errors); a workload whose flows are not the whole story
    (UDP streams, request/response times, a latency probe) also `results(pair, flows)`, its own
    results. `default_timeout(link)`, `flow_specs()` and `conditions()` tell the lab its deadline, the
    Flows to check and what its results record.
    `Pair.run(workload)` wraps them with the measurement slot, socket sampling, capture and
    counters, so an adapter only knows how to drive its own tool (a user's too: docs/workloads.md).
    A measurement may start the same workload again after stop() (a take beside hypervisor steal is
    void: measure.run), so start() begins afresh.
    """

    kind = "workload"
    #: Sockets sampled from outside; an adapter that needs none (the fake) sets False.
    sampled = True
    #: Set by the measurement for start(): the path of a StartGate (measure.gate) each flow's sender waits at before
    #: it moves data (workload.flows.wait_at_start_gate), opened once every workload has started, so flows asked to
    #: start at once do however long their programs take to start one after another. None: no gate; an adapter
    #: that ignores it starts its flows as start() launches them.
    start_gate = None

    def _spawn(self, node, target, kwargs, name, **placement):
        """Fork target(conn, **kwargs) into node's namespace from the zygote; tracked by the node and by us."""
        from .spawn import NamespaceChild

        child = NamespaceChild(node.processes.netns_path, target, kwargs, name=name, **placement)
        node.processes.adopt(child)
        self.__dict__.setdefault("_spawned", []).append((node, child))
        return child

    def _stop_spawned(self):
        """Stop every child this workload forked (only those: a capture on the same node keeps running)."""
        for node, child in self.__dict__.pop("_spawned", []):
            node.processes.release(child)

    def default_timeout(self, link):
        """Seconds the workload may take on a path of `link` when run() is given no timeout (None: it must be)."""
        return None

    def flow_specs(self):
        """The Flows this workload asks for: the lab checks their congestion controls before anything starts."""
        return []

    def conditions(self):
        """Fields every TransferResult of this workload records beyond the measurement's (starved_receiver, ...)."""
        return {}

    def start(self, pair, deadline):
        """Launch the workload's processes on pair's nodes; return once it is running."""
        raise NotImplementedError

    def wait(self, deadline):
        """Block until every flow is done (or the deadline passes: LabError naming who hung)."""
        raise NotImplementedError

    def stop(self):
        """Stop whatever still runs, by pid; safe to call twice."""
        raise NotImplementedError

    def results(self, pair, flows):
        """After the measurement: the workload's own results beyond its flows' TransferResults (``flows``, registered
        with pair's lab), for the lab to register: UdpResults, a RequestsResult, a LatencyResult ([]: none)."""
        return []


def flow_deadline(flow, link):
    """A Flow's or a Cbr stream's generous deadline on a path of `link` (a stream's: its span plus a minute)."""
    if isinstance(flow, Cbr):
        return 60.0 + flow.start + flow.duration
    return default_timeout(flow, link)


def default_timeout(flow, link):
    """Generous deadline: 10x the time at 1 Mbit/s (or a slower shaped rate) plus start-up and pauses; at most a day.

    Not the link's rate: a window-limited flow can be far slower than its link.
    """
    return min(_LONGEST_DEADLINE, _unbounded_timeout(flow, link))


def _unbounded_timeout(flow, link):
    rates = [w.rate_bps for w in (link.toward_client, link.toward_server) if w.rate_bps]
    slowest = min(rates + [1e6]) if rates else 1e6
    pauses = sum(p.seconds for p in (flow.reader, flow.writer) if hasattr(p, "seconds"))
    if flow.duration is not None:
        return 60.0 + flow.start + flow.duration + pauses
    paced = [p.rate_bps for p in (flow.reader, flow.writer) if hasattr(p, "rate_bps")]
    pace_time = 2 * transfer_time(flow.nbytes, min(paced)) if paced else 0
    return max(60.0, 10 * transfer_time(flow.nbytes, slowest) + 30 * link.rtt_s) + flow.start + pauses + pace_time
