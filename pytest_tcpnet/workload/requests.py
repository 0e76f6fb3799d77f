"""Request/response: N requests of one size answered by responses of another, on one connection or a new one each."""

from ..measure.observe import endpoint_conditions
from ..model import Conditions, check_congestion_control, format_rate, format_size, format_time, request_response_times
from ..model.app import Flow, check_buffer_bytes
from ..model.predict import PAYLOAD_PER_FRAME, PAYLOAD_PER_FRAME_IPV6, link_goodput, sustained_window
from ..model.units import parse_time
from ..model.validation import check_flag, check_integer
from ..model.window import send_window
from ..records import RequestTimes
from ..requirements import check_need
from ..results import RequestsResult
from .base import Workload, default_timeout
from .flows import gate_times_of, rr_client, rr_server

__all__ = ["RequestResponse"]


class RequestResponse(Workload):
    """`count` requests from the client, each answered by the server; the records of every request's times."""

    kind = "request/response"
    sampled = False  # each connection's TCP_INFO is read by the server itself; short flows outrun a sampler

    def __init__(
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
        connect_timeout=30.0,
    ):
        self.count = check_integer("count", count, 1, 100_000, must="a whole number of requests in 1..100000")
        self.request_size = check_buffer_bytes("request_size", request_size)
        self.response_size = check_buffer_bytes("response_size", response_size)
        self.new_connection = check_flag("new_connection", new_connection)
        self.interval = parse_time(interval, "interval")
        if not 0 <= self.interval <= 3600:
            raise ValueError(f"interval: must be in [0, 3600] seconds, got {interval!r}")
        self.sndbuf = None if sndbuf is None else check_buffer_bytes("sndbuf", sndbuf)
        self.rcvbuf = None if rcvbuf is None else check_buffer_bytes("rcvbuf", rcvbuf)
        if cc is not None:
            check_congestion_control("cc", cc)
            check_need(cc)
        self.cc = cc
        self.connect_timeout = connect_timeout
        self.records = self.server_record = None
        self.gate_times = {}
        self._children = None

    def default_timeout(self, link):
        """Every byte's generous deadline, and four round trips and the interval per request on top."""
        flow = Flow(nbytes=self.count * (self.request_size + self.response_size))
        return default_timeout(flow, link) + self.count * (self.interval + 4 * link.rtt_s)

    def start(self, pair, deadline):
        server = self._spawn(
            pair.server,
            rr_server,
            dict(
                address=pair.server.address,
                request_size=self.request_size,
                response_size=self.response_size,
                sndbuf=self.sndbuf,
                rcvbuf=None,
                cc=self.cc or pair.socket_cc.get("server"),  # one the namespace could not default to
                connections=self.count if self.new_connection else 1,
                timeout=self.connect_timeout,
            ),
            "request/response server",
        )
        port = server.receive(deadline, "listening")["port"]
        client = self._spawn(
            pair.client,
            rr_client,
            dict(
                address=pair.server.address,
                port=port,
                count=self.count,
                request_size=self.request_size,
                response_size=self.response_size,
                new_connection=self.new_connection,
                interval=self.interval,
                rcvbuf=self.rcvbuf,
                timeout=self.connect_timeout,
                start_gate=self.start_gate,
            ),
            "request/response client",
        )
        if self.start_gate is not None:  # the first request waits for every workload of the measurement to start
            client.receive(deadline, "gated")
        self._children = (server, client)

    def wait(self, deadline):
        server, client = self._children
        # The client process's dicts become typed here, at the adapter's boundary.
        report = client.receive(deadline, "result")
        self.records = [RequestTimes(**times) for times in report["requests"]]
        self.gate_times = gate_times_of(report)
        self.server_record = server.receive(deadline, "result")
        return []

    def stop(self):
        self._stop_spawned()

    def results(self, pair, flows):
        """[The RequestsResult]: each request's times beside the model's, on pair's path as its kernel and sysctls
        set it."""
        endpoints = endpoint_conditions(pair)
        kernel, sysctls = endpoints.kernel, endpoints.sysctls
        link, server_info = pair.link, self.server_record["tcp_info"]
        way = link.toward_client
        mss = PAYLOAD_PER_FRAME_IPV6 if ":" in str(pair.server.address) else PAYLOAD_PER_FRAME
        conditions = Conditions(
            kernel=kernel,
            rtt_s=link.rtt_s,
            rate_bps=way.rate_bps,
            so_rcvbuf=self.rcvbuf,
            receiver_sysctls=sysctls["client"],
            mss_bytes=mss,
        )
        receive = sustained_window(conditions)
        sndbuf = self.sndbuf
        in_flight = send_window(
            sndbuf, kernel=kernel, sysctls=sysctls["server"], chunk_bytes=min(1 << 20, sndbuf) if sndbuf else 1 << 20
        )
        window = min(receive, in_flight)
        rate = link_goodput(way.rate_bps, mss) if way.rate_bps else None
        after_idle = sysctls["server"].get("net.ipv4.tcp_slow_start_after_idle", "1") != "0"

        def times(rtt_s):
            return request_response_times(
                self.count,
                self.response_size,
                rtt_s=rtt_s,
                window_bytes=window,
                rate_bps=rate,
                new_connection=self.new_connection,
                interval_s=self.interval,
                slow_start_after_idle=after_idle,
                mss_bytes=mss,
            )

        # The RTT the server's connections saw (their srtt after each write, averaged): the path's plus the
        # endpoints' own time (in the emulated VM ~1-1.5 ms per round trip), what a window-bound response really pays
        # per round. Not the final srtt: it weighs the last few rounds (gain 1/8), and two late ones at the end read
        # 5.88 ms where the response's rounds took 5.43 ms on average (UML 6.12, two guests side by side).
        srtts = [mean / 1e6 for mean in self.server_record.get("srtt_means_us", ()) if mean]
        observed_rtt = max(link.rtt_s, sum(srtts) / len(srtts)) if srtts else None
        why = (
            f"window {format_size(window)} (receive {format_size(receive)}, in flight under the send buffer "
            f"{format_size(in_flight)}) per {format_time(link.rtt_s)} RTT"
            + (f", {format_rate(rate)} of payload on the link" if rate else "")
            + (
                "; a handshake and slow start from 10 segments each"
                if self.new_connection
                else "; slow start from 10 segments on the first"
                + (" and after idling past the RTO" if after_idle else "")
            )
        )
        exchanges = RequestsResult(
            records=self.records,
            request_size=self.request_size,
            response_size=self.response_size,
            new_connection=self.new_connection,
            interval=self.interval,
            link=link,
            kernel=kernel,
            sysctls=sysctls,
            sndbuf_requested=sndbuf,
            rcvbuf_requested=self.rcvbuf,
            expected_s=times(link.rtt_s),
            why=why,
            server_tcp_info=server_info,
            observed_rtt_s=observed_rtt,
            observed_expected_s=times(observed_rtt) if observed_rtt else None,
            **self.gate_times,
        )
        return [exchanges]
