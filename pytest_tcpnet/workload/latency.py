"""Latency under load: a request/response probe on its own connection, idle first, then beside bulk flows."""

import dataclasses

from .. import netlink
from ..results import ConcurrentResult, LatencyResult
from .base import Workload
from .bulk import Bulk
from .flows import rtt_echo_server, rtt_probe_client

__all__ = ["UnderLoad"]


class UnderLoad(Workload):
    """A latency probe for idle + duration seconds; the flows (model.Flow) start `idle` seconds after it."""

    kind = "latency under load"

    def __init__(self, flows, *, idle, duration, interval, socket_cc=None, connect_timeout=30.0):
        self.flows = [dataclasses.replace(flow, start=flow.start + idle) for flow in flows]
        self.bulk = Bulk(self.flows, socket_cc=socket_cc, connect_timeout=connect_timeout) if flows else None
        self.idle, self.duration, self.interval = idle, duration, interval
        self.connect_timeout = connect_timeout
        self.probe_record = None
        self._probe = None

    def start(self, pair, deadline):
        server = self._spawn(
            pair.server,
            rtt_echo_server,
            dict(address=pair.server.address, timeout=self.connect_timeout),
            "rtt echo server",
        )
        port = server.receive(deadline, "listening")["port"]
        client = self._spawn(
            pair.client,
            rtt_probe_client,
            dict(
                address=pair.server.address,
                port=port,
                interval=self.interval,
                duration=self.idle + self.duration,
                timeout=self.connect_timeout,
            ),
            "rtt probe",
        )
        self._probe = (server, client, client.receive(deadline, "connected"))
        if self.bulk is not None:
            self.bulk.start(pair, deadline)

    def wait(self, deadline):
        outcomes = self.bulk.wait(deadline) if self.bulk is not None else []
        server, client, connected = self._probe
        record = client.receive(deadline, "result")
        server.receive(deadline, "result")
        self.probe_record = dict(record, local=tuple(connected["local"]), remote=tuple(connected["remote"]))
        return outcomes

    def stop(self):
        if self.bulk is not None:
            self.bulk.stop()
        self._stop_spawned()

    def results(self, pair, flows):
        """The streams' UdpResults, then the LatencyResult: the probe's samples, idle and beside the flows (their
        TransferResults ``flows``, each given its share of the path)."""
        udp = self.bulk.results(pair, flows) if self.bulk is not None else []
        record = self.probe_record
        origin = record["started_at"]
        samples = [(t - origin, rtt) for t, rtt, _ in record["samples"]]
        app_samples = [(t - origin, app_rtt) for t, _, app_rtt in record["samples"]]
        spans = [(r.first_byte_at, r.receiver.last_byte_at) for r in flows]
        spans += [(u.started_at, u.ended_at) for u in udp]
        if spans:
            loaded_from = min(start for start, _ in spans) - origin
            loaded_to = max(end for _, end in spans) - origin
        else:
            loaded_from = loaded_to = self.idle + self.duration
        latency = LatencyResult(
            samples=samples,
            app_samples=app_samples,
            stamped=record["stamped"],
            idle_to=min(self.idle, loaded_from),
            loaded_from=loaded_from,
            loaded_to=min(loaded_to, self.idle + self.duration),
            interval=self.interval,
            link=pair.link,
            kernel=flows[0].kernel if flows else netlink.kernel_release(),
            flows=ConcurrentResult(flows=pair.lab.share(flows, udp, pair.link, what="the link"), udp=udp)
            if flows
            else None,
            udp=udp,
            artifact_dir=pair.lab.artifact_dir,
        )
        return [*udp, latency]
