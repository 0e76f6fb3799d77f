"""The workload methods of a pair and a topology: each builds one adapter and runs it through run(workload).

Pair and Topology (lab/) inherit them, so the lab names no workload and a new one lands here and in its adapter.
"""

from ..errors import LabError, MissingCapability
from ..model.app import Flow
from ..results import ConcurrentResult, WindowProbe
from .bulk import Bulk

__all__ = ["PairWorkloads", "TopologyWorkloads"]


class PairWorkloads:
    """transfer(), concurrent(), latency_under_load(), requests(), iperf3(), http_download() and
    measure_advertised_window() over a pair's run(workload) (its lab, link and ends come from the Pair)."""

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


class TopologyWorkloads:
    """concurrent() over a topology's run([workload per pair])."""

    def concurrent(self, flows, *, capture=False, sample_interval=None, timeout=None):
        """Run flows[i] (a Flow, or None for none) on pair i, all at once; a ConcurrentResult of them in pair order.

        Each flow is measured as its pair's transfer() is (counters, capture), inside one measurement slot; every
        pair's counters cover the same span, and one sampler reads each namespace once per sample for all pairs.
        """
        flows = list(flows)
        self._per_pair("flows", flows, Flow, "a Flow(...)")
        runs = self.run(
            [None if flow is None else Bulk([flow]) for flow in flows],
            timeout=timeout,
            sample_interval=sample_interval,
            capture=capture,
        )
        return ConcurrentResult(flows=[run.flows[0] for run in runs if run is not None])
