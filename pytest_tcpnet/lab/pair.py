"""A client – server pair of a world: the workloads, observe() and probes run on one."""

import math

from ..errors import LabError, MissingCapability
from ..model.app import Flow
from ..requirements import check_need
from ..results import ConcurrentResult, WindowProbe
from ..workload import Bulk
from .world import WorldView

__all__ = ["Pair"]


class Pair(WorldView):
    """A client and a server of a world and the path between them; every workload and observe() run on one.

    The two-host world of Lab.pair() is one; so is each client-server pair of a star or a
    dumbbell (their pairs share routers and, in a star, the client). `link` is the path as the
    model sees it: the links it crosses, in series (Link.in_series).
    """

    kind = "pair"

    def __init__(self, world, index, client, server, link, ends, shaped):
        self.world = world
        self.lab = world.lab
        self.index = index
        self.client = client
        self.server = server
        self.link = link
        self._ends = list(ends)  # every veth end the path crosses, client to server
        self._shaped = list(shaped)  # the ends whose qdiscs the path's packets cross
        self.routers = tuple(dict.fromkeys(end.node for end in self._ends if end.node.role == "router"))

    @property
    def client_host(self):
        """The client's Host spec."""
        return self.world.hosts[self.client.name]

    @property
    def server_host(self):
        """The server's Host spec."""
        return self.world.hosts[self.server.name]

    @property
    def router(self):
        """The first router from the client (the only one of a plain pair)."""
        return self.routers[0]

    @property
    def nodes(self):
        """(client, routers..., server)."""
        return (self.client, *self.routers, self.server)

    @property
    def offloads(self):
        """{"node/ifname": {feature: enabled}} of the path's interfaces, as the build left them."""
        return {end.key: self.world.offloads[end.key] for end in self._ends if end.key in self.world.offloads}

    @property
    def qdisc_plan(self):
        """{ifname: [what was installed]} of the path's shaped interfaces."""
        return {end.ifname: self.world.qdisc_plan[end.ifname] for end in self._shaped}

    @property
    def socket_cc(self):
        """{role: cc} the endpoints' Hosts asked for but their namespaces could not default to (set per socket)."""
        return {
            role: self.world.socket_cc[node.name]
            for role, node in (("client", self.client), ("server", self.server))
            if node.name in self.world.socket_cc
        }

    def interface_counters(self):
        """{"node/ifname": counters} for every veth end along the path."""
        return self.world.interface_counters(self._ends)

    @property
    def shaped_ways(self):
        """{ifname: (direction, OneWay)} of the path's interfaces one way shapes whole: what each was asked to do,
        for checking what it did (a router end after its veth peer sends toward the client, one before toward the
        server)."""
        ways = {}
        for end in self._shaped:
            way = self.world.whole_way(end)
            if way is not None:
                ways[end.ifname] = ("toward_client" if self._ends.index(end) % 2 else "toward_server", way)
        return ways

    def router_qdisc_stats(self):
        """{ifname: [qdisc stats]} of the path's shaped router interfaces."""
        return self.world.qdisc_stats(self._shaped)

    def transfer(
        self,
        nbytes=None,
        *,
        duration=None,
        direction="download",
        sndbuf=None,
        rcvbuf=None,
        cc=None,
        reader=None,
        writer=None,
        write_size=1 << 20,
        starve_receiver=False,
        capture=False,
        sample_interval=None,
        timeout=None,
    ):
        """Move nbytes (or send for `duration` seconds) between the endpoints with the bulk workload; measure it.

        "download" sends server -> client, "upload" client -> server; sndbuf/rcvbuf set SO_SNDBUF
        on the sender and SO_RCVBUF on the receiver (None: kernel autotuning); cc sets
        TCP_CONGESTION on the sender's socket; reader/writer are Pace(...) or Pause(...) for the
        receiving/sending application; starve_receiver runs the reader at the lowest priority on a
        core shared with a CPU hog; write_size is the bytes per send() (C11); capture=True records the sender's side with tshark;
        sample_interval (seconds; default fit to the RTT, 0 for none) samples TCP_INFO and socket
        memory of both ends (``result.series(field, side)``).
        """
        flow = Flow(
            nbytes=nbytes,
            duration=duration,
            direction=direction,
            sndbuf=sndbuf,
            rcvbuf=rcvbuf,
            cc=cc,
            reader=reader,
            writer=writer,
            write_size=write_size,
        )
        workload = Bulk([flow], starve_receiver=starve_receiver)
        (result,) = self.run(workload, capture=capture, sample_interval=sample_interval, timeout=timeout).flows
        if nbytes is not None and result.nbytes != flow.nbytes:
            raise LabError(f"receiver got {result.nbytes} of {flow.nbytes} bytes\n{result.describe()}")
        return result

    def concurrent(self, flows, *, capture=False, sample_interval=None, timeout=None):
        """Run several Flow(...)s on this pair at once (each with its own size or duration, buffers, cc, start).

        Cbr(...) entries run unresponsive UDP streams beside them (their loss and one-way delay in
        `.udp`). Returns a ConcurrentResult: `.flows` (a TransferResult each), `.total_bps`, `.jain_index`.
        """
        flows = list(flows)
        if not any(isinstance(f, Flow) for f in flows):
            raise TypeError(f"flows: expected a list of Flow(...) (at least one) and Cbr(...) streams, got {flows!r}")
        run = self.run(Bulk(flows), capture=capture, sample_interval=sample_interval, timeout=timeout)
        # Flows beside each other share the link: the model then predicts each one's share, not the whole link.
        shared = self.lab.share(run.flows, run.results, self.link, what="the link")
        return ConcurrentResult(flows=shared, udp=run.results)

    def latency_under_load(
        self, *, duration, flows=None, probe_interval=0.01, idle=1.0, capture=False, sample_interval=None, timeout=None
    ):
        """The RTT a small request/response sees on this path, idle and then beside bulk flows (bufferbloat).

        A probe sends a 64-byte request on its own TCP_NODELAY connection every probe_interval s
        (closed loop: a late answer delays the next one) and times each answer as ping would (the kernel's
        receive time of the answer, less the time the echo server held the request; the application's
        own times are kept beside them): alone for `idle`
        seconds, then for `duration` seconds beside the flows (default: one download of that
        duration; each Flow's own start counts from the end of the idle phase). Returns a
        LatencyResult: idle_rtt_s, loaded_rtt_s(p), induced_latency_s(p), the probe's samples and
        the flows' ConcurrentResult as `.flows`.
        """
        from ..workload.latency import UnderLoad

        workload = UnderLoad(duration=duration, flows=flows, probe_interval=probe_interval, idle=idle)
        run = self.run(workload, capture=capture, sample_interval=sample_interval, timeout=timeout)
        *_, latency = run.results
        return latency

    def requests(
        self,
        count=1,
        *,
        request_size=64,
        response_size,
        new_connection=False,
        interval=0.0,
        sndbuf=None,
        rcvbuf=None,
        cc=None,
        timeout=None,
    ):
        """`count` requests from the client, each answered by `response_size` bytes from the server; time each one.

        On one connection (back to back, or one every `interval` s) or a new connection each
        (new_connection=True: each request pays its handshake and slow start). sndbuf: the
        server's SO_SNDBUF (it then writes no more than that at once); rcvbuf: the client's
        SO_RCVBUF; cc: the server's congestion control. Returns a RequestsResult: fct_s per
        request, fct_percentile(p), the model's expected_s beside them, describe().
        """
        from ..workload.requests import RequestResponse

        workload = RequestResponse(
            count,
            request_size=request_size,
            response_size=response_size,
            new_connection=new_connection,
            interval=interval,
            sndbuf=sndbuf,
            rcvbuf=rcvbuf,
            cc=cc,
        )
        (exchanges,) = self.run(workload, sample_interval=0, timeout=timeout).results
        return exchanges

    def iperf3(
        self,
        *,
        duration,
        direction="download",
        cc=None,
        window=None,
        parallel=1,
        capture=False,
        sample_interval=None,
        timeout=None,
    ):
        """One iperf3 TCP test (libiperf through the `iperf3` bindings; `iperf3 -J` as the fallback).

        The result's throughput_bps is iperf3's own received average; `details["intervals"]` has
        the sender's per-interval rate, retransmits, cwnd and rtt; series() come from sampling.
        """
        from ..workload.iperf3 import Iperf3

        workload = Iperf3(duration=duration, direction=direction, cc=cc, window=window, parallel=parallel)
        return self.run(workload, capture=capture, sample_interval=sample_interval, timeout=timeout).flows[0]

    def http_download(self, nbytes, *, limit_rate=None, capture=False, sample_interval=None, timeout=None):
        """curl in the client downloads nbytes from an HTTP server in the server namespace.

        limit_rate is curl's --limit-rate as curl spells it ("200k" = 200 KiB/s). The result's
        throughput_bps is curl's own average; rate_series() comes from the client socket's
        sampled bytes_received.
        """
        from ..workload.http import HttpDownload

        workload = HttpDownload(nbytes, limit_rate=limit_rate)
        return self.run(workload, capture=capture, sample_interval=sample_interval, timeout=timeout).flows[0]

    def run(self, workload, *, timeout=None, capture=False, sample_interval=None):
        """Run a Workload, yours or the plugin's, on this pair and measure it as every workload method here is
        measured (docs/workloads.md, "Your own adapter"): a WorkloadRun of its connections' TransferResults and
        its own results, all registered with the lab (session table, results file, failure artifacts).

        timeout: seconds from the measurement's start until the workload must be done (a LabError then, every
        process it started stopped); None: the workload's own default_timeout(link), which yours must then give.
        capture and sample_interval: as for transfer().
        """
        return self._run([(self, workload)], timeout=timeout, capture=capture, sample_interval=sample_interval)[0]

    def observe(self, *, capture=False, sample_interval=None, app_window=None):
        """Measure whatever runs on this pair inside the block: your own programs, started with popen/run/spawn/call.

        ``with pair.observe() as seen: ...`` holds a measurement slot, samples TCP_INFO and socket
        memory of every TCP socket in the client and server namespaces (both ends, matched by
        4-tuple), reads the path's counters before and after and, with capture=True, captures
        at both ends. Afterwards ``seen.flows`` holds one TransferResult per connection between
        the two ends, largest first, registered with the lab (session table, results files,
        failure artifacts) and accepted by every assertion; each one's capture is the one taken
        at the end that sent its data. docs/your-application.md says what sampling can miss.
        app_window: your protocol's own bound, if it has one (bytes, or "16kb"): what it keeps
        outstanding per application round trip (a stop-and-wait protocol's chunk per ACK); the
        model then predicts that bound where it binds, instead of the network's alone.
        """
        from ..measure.observe import Observation

        app_window = check_observe_options(capture, app_window)
        return Observation(self, capture=capture, sample_interval=sample_interval, app_window_bytes=app_window)

    def measure_advertised_window(self, *, rcvbuf=None, nbytes=None, direction="download"):
        """The largest window the receiver advertised during a transfer, as the sender saw it (TCP_INFO snd_wnd).

        rcvbuf sets SO_RCVBUF on the receiver (None: autotuning from tcp_rmem); the receiver
        reads as fast as it can, so the window is limited by the buffer alone (C8).
        """
        if nbytes is None:
            nbytes = max(2_000_000, 20 * (2 * rcvbuf if isinstance(rcvbuf, int) else 0))
        result = self.transfer(nbytes, direction=direction, rcvbuf=rcvbuf, sample_interval=0.001)
        windows = [w for w in result.tcp_info_series("snd_wnd") if w is not None]
        windows.append(result.sender_tcp_info.get("snd_wnd"))
        if not any(windows):
            raise MissingCapability("tcpi_snd_wnd", f"kernel {result.kernel} does not report snd_wnd in TCP_INFO")
        receiver = self.client if direction == "download" else self.server
        probe = WindowProbe(
            window_bytes=max(w for w in windows if w is not None),
            rcvbuf_requested=result.rcvbuf_requested,
            rcvbuf_effective=result.effective_rcvbuf,
            kernel=result.kernel,
            sysctls=result.sysctls[receiver.role],
            transfer=result,
        )
        self.lab.register(probe)  # report: the probe stands for its transfer in the summary
        return probe

    def __repr__(self):
        return (
            f"<Pair #{self.index} {self.link!r} client={self.client_host.describe()} "
            f"server={self.server_host.describe()}>"
        )


def check_observe_options(capture, app_window):
    """observe()'s options checked before anything starts; returns app_window in bytes (or None)."""
    from ..model.units import parse_size

    if capture not in (False, True):
        raise ValueError(
            f"capture: must be True or False (both ends are captured; each connection gets the "
            f"capture of the end that sent its data), got {capture!r}"
        )
    if app_window is not None:
        app_window = parse_size(app_window, "app_window")
        if not (math.isfinite(app_window) and app_window >= 1):
            raise ValueError(f"app_window: must be at least 1 byte (or None: no bound of its own), got {app_window!r}")
        app_window = int(app_window)
    if capture:
        check_need("tshark")
    return app_window
