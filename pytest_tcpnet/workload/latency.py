"""Latency under load: a request/response probe on its own connection, idle first, then beside bulk flows."""

import dataclasses

from ..measure.observe import endpoint_conditions
from ..model.app import Cbr, Flow
from ..model.units import parse_time
from ..results import ConcurrentResult, LatencyResult
from .base import Workload, flow_deadline
from .bulk import Bulk
from .flows import rtt_echo_server, rtt_probe_client

__all__ = ["UnderLoad"]


class UnderLoad(Workload):
    """A latency probe for idle + duration seconds; the flows (model.Flow and Cbr; default one download of that
    duration) start `idle` seconds after it. Its options are Pair.latency_under_load's."""

    kind = "latency under load"

    def __init__(self, *, duration, flows=None, probe_interval=0.01, idle=1.0, connect_timeout=30.0):
        duration = Flow(duration=duration).duration  # the same validation as a flow's duration
        flows = [Flow(duration=duration)] if flows is None else list(flows)
        if not all(isinstance(f, (Flow, Cbr)) for f in flows):
            raise TypeError(f"flows: expected a list of Flow(...) and Cbr(...) (empty: the probe alone), got {flows!r}")
        interval = parse_time(probe_interval, "probe_interval")
        if not 0.001 <= interval <= 10:
            raise ValueError(f"probe_interval: must be in [1 ms, 10 s], got {probe_interval!r}")
        idle = parse_time(idle, "idle")
        if not interval <= idle <= 600:
            raise ValueError(f"idle: must be at least one probe_interval and at most 600 s, got {idle!r}")
        self.flows = [dataclasses.replace(flow, start=flow.start + idle) for flow in flows]
        self.bulk = Bulk(self.flows, connect_timeout=connect_timeout) if flows else None
        self.idle, self.duration, self.interval = idle, duration, interval
        self.connect_timeout = connect_timeout
        self.probe_record = None
        self._probe = None

    def default_timeout(self, link):
        """The probe's idle and loaded phases, or the flows' own deadlines (they start after the idle phase)."""
        return max([self.idle + self.duration + 30.0] + [flow_deadline(f, link) for f in self.flows])

    def flow_specs(self):
        return [f for f in self.flows if isinstance(f, Flow)]

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
            kernel=flows[0].kernel if flows else endpoint_conditions(pair).kernel,
            flows=ConcurrentResult(flows=pair.lab.share(flows, udp, pair.link, what="the link"), udp=udp)
            if flows
            else None,
            udp=udp,
            artifact_dir=pair.lab.artifact_dir,
        )
        return [*udp, latency]
