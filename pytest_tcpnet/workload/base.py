"""The contract every workload adapter follows (bulk, iperf3, http, fake)."""

from dataclasses import dataclass, field

__all__ = ["Workload", "FlowOutcome"]


@dataclass
class FlowOutcome:
    """What one flow of a workload reported: the sender's and receiver's records, in the workload's own terms.

    Records use the bulk flow's keys where they apply: nbytes, connected_at, first_byte_at,
    last_byte_at, checkpoints [(t, bytes)], pauses, buffers {sndbuf, rcvbuf, cc}, tcp_info,
    local/remote addresses. `reported_bps` is a tool's own average (iperf3, curl) when it has one.
    """

    sender: dict
    receiver: dict
    sender_role: str  # "client" or "server": which namespace sent the data
    spec: object = None  # the Flow (or the workload's own options) this outcome answers
    reported_bps: "float | None" = None
    details: dict = field(default_factory=dict)


class Workload:
    """One kind of traffic on a pair: start it inside the pair's nodes, wait for it, stop it by pid.

    Subclasses implement `start(pair, deadline)` (processes launched, servers listening),
    `wait(deadline) -> [FlowOutcome]` and `stop()` (idempotent; also called on errors); a workload
    whose flows are not the whole story (UDP streams, request/response times, a latency probe) also
    `results(pair, flows)`, its own results.
    `Pair.run(workload)` wraps them with the measurement slot, socket sampling, capture and
    counters, so an adapter only knows how to drive its own tool (a user's too: docs/workloads.md).
    """

    kind = "workload"
    #: Sockets sampled from outside; an adapter that needs none (the fake) sets False.
    sampled = True

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
