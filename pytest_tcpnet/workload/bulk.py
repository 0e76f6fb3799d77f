"""Bulk flows: the project's own sender and receiver, with every socket knob and paced or pausing ends."""

import os

from ..model.app import Cbr, Flow
from ..model.validation import check_flag
from ..results import UdpResult
from .base import FlowOutcome, Workload, flow_deadline
from .flows import bulk_endpoint, cpu_hog, udp_cbr_sender, udp_sink

__all__ = ["Bulk", "STARVED_READ_SIZE"]

STARVED_READ_SIZE = 16384


class Bulk(Workload):
    """One or more bulk flows (model.Flow) between a pair's endpoints; the server side listens.

    model.Cbr entries run UDP streams beside them: wait() returns the TCP flows' outcomes, results() the
    streams' UdpResults.
    """

    kind = "bulk"

    def __init__(self, flows, *, starve_receiver=False, connect_timeout=30.0):
        flows = list(flows)
        if not flows or not all(isinstance(f, (Flow, Cbr)) for f in flows):
            raise TypeError(f"flows: expected a list of Flow(...) and Cbr(...) streams (at least one), got {flows!r}")
        self.flows = [flow for flow in flows if not isinstance(flow, Cbr)]
        self.streams = [flow for flow in flows if isinstance(flow, Cbr)]
        self.udp_records = []
        self._udp = []
        self.starve_receiver = check_flag("starve_receiver", starve_receiver)
        if starve_receiver and not self.flows:
            raise ValueError("starve_receiver: needs a TCP Flow whose receiver to starve; only Cbr streams were given")
        self.connect_timeout = connect_timeout
        self._running = []

    def default_timeout(self, link):
        """The longest of the flows' and streams' own deadlines."""
        return max(flow_deadline(flow, link) for flow in self.flows + self.streams)

    def flow_specs(self):
        return list(self.flows)

    def conditions(self):
        return {"starved_receiver": self.starve_receiver}

    def start(self, pair, deadline):
        self.udp_records = []  # a measurement taken again (measure.run) starts afresh
        starved_cpu = max(os.sched_getaffinity(0)) if self.starve_receiver else None
        if self.starve_receiver:
            # The hog runs before the first byte, so the whole transfer competes with it.
            hog_node = pair.client if self.flows[0].direction == "download" else pair.server
            self._spawn(hog_node, cpu_hog, {}, "cpu hog", cpu=starved_cpu).receive(deadline, "spinning")
        for index, flow in enumerate(self.flows):
            sender, receiver = (
                (pair.server, pair.client) if flow.direction == "download" else (pair.client, pair.server)
            )
            cc = flow.cc or pair.socket_cc.get(sender.role)  # one the namespace could not default to
            ends = {
                sender.role: dict(
                    role="sender",
                    nbytes=flow.nbytes,
                    duration=flow.duration,
                    sndbuf=flow.sndbuf,
                    cc=cc,
                    writer=flow.writer,
                    write_size=flow.write_size,
                ),
                receiver.role: dict(role="receiver", rcvbuf=flow.rcvbuf, reader=flow.reader),
            }
            if self.starve_receiver:
                # An application's 16 KB reads (curl's buffer), not our 1 MiB ones: a starved reader then
                # needs many CPU slices per buffer it drains, as a real one does.
                ends[receiver.role]["read_size"] = STARVED_READ_SIZE
            placement = {}
            if self.starve_receiver:
                # The reader shares one core with a hog at the lowest priority: it gets a sliver of CPU.
                placement = {receiver.role: {"cpu": starved_cpu, "nice": 19}}
            # The flow's data moves once the measurement opens its start gate: the end that waits for it is the
            # client of a delayed flow (before its delay), else the sender (once connected).
            gated = None if self.start_gate is None else "client" if flow.start else sender.role
            if gated is not None:
                ends[gated]["start_gate"] = self.start_gate
            server = self._spawn(
                pair.server,
                bulk_endpoint,
                dict(
                    mode="serve",
                    address=pair.server.address,
                    timeout=self.connect_timeout + flow.start,
                    **ends["server"],
                ),
                f"bulk server #{index}",
                **placement.get("server", {}),
            )
            port = server.receive(deadline, "listening")["port"]
            client = self._spawn(
                pair.client,
                bulk_endpoint,
                dict(
                    mode="connect",
                    address=pair.server.address,
                    port=port,
                    start_delay=flow.start,
                    timeout=self.connect_timeout,
                    **ends["client"],
                ),
                f"bulk client #{index}",
                **placement.get("client", {}),
            )
            if gated is not None:
                (client if gated == "client" else server).receive(deadline, "gated")
            self._running.append((flow, sender.role, server, client))
        for index, stream in enumerate(self.streams):
            sender, receiver = (
                (pair.server, pair.client) if stream.direction == "download" else (pair.client, pair.server)
            )
            sink = self._spawn(
                receiver,
                udp_sink,
                dict(address=receiver.address, timeout=stream.start + stream.duration + self.connect_timeout),
                f"udp sink #{index}",
            )
            port = sink.receive(deadline, "listening")["port"]
            source = self._spawn(
                sender,
                udp_cbr_sender,
                dict(
                    address=receiver.address,
                    port=port,
                    rate=stream.rate,
                    duration=stream.duration,
                    packet_size=stream.packet_size,
                    start_delay=stream.start,
                    start_gate=self.start_gate,
                ),
                f"udp sender #{index}",
            )
            if self.start_gate is not None:
                source.receive(deadline, "gated")
            self._udp.append((stream, sink, source))

    def wait(self, deadline):
        outcomes = []
        for flow, sender_role, server, client in self._running:
            connected = {
                "server": server.receive(deadline, "connected"),
                "client": client.receive(deadline, "connected"),
            }
            records = {"server": server.receive(deadline, "result"), "client": client.receive(deadline, "result")}
            for role in records:
                records[role]["local"] = tuple(connected[role]["local"])
                records[role]["remote"] = tuple(connected[role]["remote"])
                records[role]["buffers_at_connect"] = connected[role]["buffers"]
            receiver_role = "client" if sender_role == "server" else "server"
            outcomes.append(
                FlowOutcome(
                    sender=records[sender_role], receiver=records[receiver_role], sender_role=sender_role, spec=flow
                )
            )
        for stream, sink, source in self._udp:
            sent = source.receive(deadline, "result")
            self.udp_records.append((stream, sent, sink.receive(deadline, "result")))
        return outcomes

    def stop(self):
        self._stop_spawned()
        self._running.clear()
        self._udp.clear()

    def results(self, pair, flows):
        """The UDP streams' UdpResults (what each sent, each datagram's arrival), on pair's path."""
        return [
            UdpResult(
                spec=stream,
                sent=sent["sent"],
                send_errors=sent["send_errors"],
                arrivals=sink["arrivals"],
                packet_size=stream.packet_size,
                started_at=sent["started_at"],
                ended_at=sent["ended_at"],
                link=pair.link,
            )
            for stream, sent, sink in self.udp_records
        ]
