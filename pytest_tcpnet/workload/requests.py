"""Request/response: N requests of one size answered by responses of another, on one connection or a new one each."""

from .base import Workload
from .flows import rr_client, rr_server

__all__ = ["RequestResponse"]


class RequestResponse(Workload):
    """`count` requests from the client, each answered by the server; the records of every request's times."""

    kind = "request/response"
    sampled = False  # each connection's TCP_INFO is read by the server itself; short flows outrun a sampler

    def __init__(
        self,
        *,
        count,
        request_size,
        response_size,
        new_connection,
        interval,
        sndbuf=None,
        rcvbuf=None,
        cc=None,
        connect_timeout=30.0,
    ):
        self.count, self.request_size, self.response_size = count, request_size, response_size
        self.new_connection, self.interval = new_connection, interval
        self.sndbuf, self.rcvbuf, self.cc = sndbuf, rcvbuf, cc
        self.connect_timeout = connect_timeout
        self.records = self.server_record = None
        self._children = None

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
                cc=self.cc,
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
            ),
            "request/response client",
        )
        self._children = (server, client)

    def wait(self, deadline):
        server, client = self._children
        self.records = client.receive(deadline, "result")["requests"]
        self.server_record = server.receive(deadline, "result")
        return []

    def stop(self):
        self._stop_spawned()
