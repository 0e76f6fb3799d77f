"""HTTP download: a Python HTTP/1.1 server in the server namespace, curl in the client (C4: --limit-rate)."""

import json
import re
import time

from ..errors import LabError, program_path
from ..model.app import Flow, RateLimit
from ..requirements import check_need
from .base import FlowOutcome, Workload, default_timeout
from .flows import gate_times_of, gated_program, http_server

__all__ = ["HttpDownload", "check_limit_rate"]

_LIMIT_RATE = re.compile(r"^[0-9]+(\.[0-9]+)?[kKmMgG]?$")
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def check_limit_rate(value):
    """curl's --limit-rate as curl spells it ('200k': bytes per second, 1024-based); returns bytes/s."""
    if value is None:
        return None
    text = str(value)
    if isinstance(value, bool) or not _LIMIT_RATE.match(text):
        raise ValueError(
            f"limit_rate: expected curl's spelling, a number of bytes/s with an optional k, m or g "
            f"suffix (1024-based), e.g. '200k', got {value!r}"
        )
    number = float(text.rstrip("kKmMgG"))
    rate = number * _UNITS[text[-1].lower() if text[-1].isalpha() else ""]
    if rate <= 0:
        raise ValueError(f"limit_rate: must be > 0, got {value!r}")
    return rate


class HttpDownload(Workload):
    """curl downloads nbytes from an HTTP server on the pair; curl's own average is the result's goodput."""

    kind = "http"

    def __init__(self, nbytes, *, limit_rate=None):
        self.flow = Flow(nbytes=nbytes)
        check_need("curl")
        program_path("curl", package="curl")
        self.nbytes = self.flow.nbytes
        self.limit_rate = limit_rate
        self.limit_rate_bytes = check_limit_rate(limit_rate)
        # curl reads no faster than its limit on average: the model's application bound, as for a paced reader.
        self.reader = RateLimit(self.limit_rate_bytes, f"curl --limit-rate {limit_rate}") if limit_rate else None
        self._server = self._curl = None

    def default_timeout(self, link):
        """The transfer's generous deadline, and three times what curl's --limit-rate lets it take."""
        paced = 3 * self.nbytes / self.limit_rate_bytes if self.limit_rate_bytes else 0.0
        return default_timeout(self.flow, link) + paced

    def flow_specs(self):
        return [self.flow]

    def start(self, pair, deadline):
        self._server = self._spawn(pair.server, http_server, dict(address=pair.server.address), "http server")
        port = self._server.receive(deadline, "listening")["port"]
        argv = [
            "curl",
            "--silent",
            "--show-error",
            "--output",
            "/dev/null",
            "--write-out",
            "%{json}",
            "--max-time",
            f"{max(1.0, deadline - time.monotonic()):.0f}",
        ]
        if self.limit_rate:
            argv += ["--limit-rate", str(self.limit_rate)]
        host = f"[{pair.server.address}]" if ":" in pair.server.address else pair.server.address
        argv.append(f"http://{host}:{port}/{self.nbytes}")
        # curl connects once the measurement opens its start gate: a download asked to start beside other
        # workloads does, however long their programs take to start.
        gate = dict(start_gate=self.start_gate, timeout=max(1.0, deadline - time.monotonic()))
        self._curl = self._spawn(pair.client, gated_program, dict(argv=argv, **gate), "curl")
        if self.start_gate is not None:
            self._curl.receive(deadline, "gated")

    def wait(self, deadline):
        report = self._curl.receive(deadline, "result")
        out, err, returncode = report["stdout"], report["stderr"], report["returncode"]
        try:
            timing = json.loads(out)
        except ValueError:
            raise LabError(f"curl failed (exit {returncode}): {err.strip() or out.strip()}") from None
        if returncode != 0 or timing.get("size_download") != self.nbytes:
            raise LabError(
                f"curl failed (exit {returncode}, {timing.get('size_download')} of "
                f"{self.nbytes} bytes): {err.strip() or timing.get('errormsg')}"
            )
        start = report["started_at"]
        client_end = (timing["local_ip"], timing["local_port"])
        server_end = (timing["remote_ip"], timing["remote_port"])
        receiver = {
            "nbytes": self.nbytes,
            "local": client_end,
            "remote": server_end,
            "connected_at": start + timing["time_connect"],
            "first_byte_at": start + timing["time_starttransfer"],
            "last_byte_at": start + timing["time_total"],
            "buffers": {},
            **gate_times_of(report),
        }
        sender = {"nbytes": self.nbytes, "local": server_end, "remote": client_end, "buffers": {}, "tcp_info": {}}
        return [
            FlowOutcome(
                sender=sender,
                receiver=receiver,
                sender_role="server",
                spec=self,
                reported_bps=timing["speed_download"] * 8,
                details={"curl": timing, "ended_at": report["ended_at"]},
            )
        ]

    def stop(self):
        self._stop_spawned()
