"""iperf3 on a pair: libiperf through the PyPI `iperf3` bindings, `iperf3 -J` where they cannot load."""

import json
import shutil
import time

from .. import interrupts
from ..errors import LabError, MissingCapability
from ..model.app import Flow
from ..model.validation import check_integer
from ..requirements import check_need
from .base import FlowOutcome, Workload, default_timeout
from .flows import gate_times_of, gated_program, iperf3_client, iperf3_server

__all__ = ["Iperf3", "bindings_available"]

PORT = 5201  # the pair's namespaces are private: iperf3's default port is always free there


def bindings_available():
    """True when `import iperf3` works and libiperf loads (Debian: libiperf0)."""
    try:
        from ctypes import cdll, util

        import iperf3  # noqa: F401  (importable is part of "available")

        name = util.find_library("iperf")
        cdll.LoadLibrary(name or "libiperf.so.0")
    except (ImportError, OSError):
        return False
    return True


class Iperf3(Workload):
    """One iperf3 test over TCP (each side a fresh forked process: a second run in one process fails)."""

    kind = "iperf3"

    def __init__(self, *, duration, direction="download", cc=None, window=None, parallel=1, use_bindings=None):
        self.flow = Flow(duration=duration, direction=direction, cc=cc, rcvbuf=window)
        if self.flow.duration != int(self.flow.duration):
            raise ValueError(f"duration: iperf3 runs whole seconds; got {duration!r}")
        self.parallel = check_integer("parallel", parallel, 1, 128, must="an int in 1..128 (iperf3 -P)")
        self.duration, self.direction, self.cc, self.window = self.flow.duration, direction, cc, self.flow.rcvbuf
        if use_bindings is None:
            check_need("iperf3")
        if use_bindings is None:
            use_bindings = bindings_available()
        if not use_bindings and shutil.which("iperf3") is None:
            raise MissingCapability(
                "iperf3",
                "neither the iperf3 Python bindings (pip install iperf3; apt-get "
                "install libiperf0) nor the iperf3 command are available",
            )
        self.use_bindings = use_bindings

    def default_timeout(self, link):
        return default_timeout(self.flow, link)

    def flow_specs(self):
        return [self.flow]

    def start(self, pair, deadline):
        reverse = self.direction == "download"
        if self.use_bindings:
            self._server = self._spawn(
                pair.server, iperf3_server, dict(address=pair.server.address, port=PORT), "iperf3 server"
            )
            self._server.receive(deadline, "listening")
            self._client = self._spawn(
                pair.client,
                iperf3_client,
                dict(
                    address=pair.server.address,
                    port=PORT,
                    duration=self.duration,
                    reverse=reverse,
                    cc=self.cc,
                    window=self.window,
                    parallel=self.parallel,
                    start_gate=self.start_gate,
                    timeout=max(1.0, deadline - time.monotonic()),
                ),
                "iperf3 client",
            )
        else:
            self._server = self._spawn(
                pair.server,
                gated_program,
                dict(argv=["iperf3", "-s", "-1", "-J", "-B", pair.server.address, "-p", str(PORT)]),
                "iperf3 -s",
            )
            _wait_listening(pair, deadline)
            argv = [
                "iperf3",
                "-c",
                pair.server.address,
                "-p",
                str(PORT),
                "-J",
                "-t",
                f"{self.duration:g}",
                "-P",
                str(self.parallel),
                "--get-server-output",
            ] + (["-R"] if reverse else [])
            argv += (["-C", self.cc] if self.cc else []) + (["-w", str(self.window)] if self.window else [])
            gate = dict(start_gate=self.start_gate, timeout=max(1.0, deadline - time.monotonic()))
            self._client = self._spawn(pair.client, gated_program, dict(argv=argv, **gate), "iperf3 -c")
        if self.start_gate is not None:
            # The client connects once every workload of the measurement has started (its programs are set up).
            self._client.receive(deadline, "gated")

    def wait(self, deadline):
        report = self._client.receive(deadline, "result")
        data = report["json"] if "json" in report else _cli_json(report)
        if "error" in data:
            raise LabError(f"iperf3 failed: {data['error']}")
        end = data["end"]
        sender_side = "server" if self.direction == "download" else "client"
        connected = data["start"]["connected"][0]
        client_end = (connected["local_host"], connected["local_port"])
        server_end = (connected["remote_host"], connected["remote_port"])
        gate_times = gate_times_of(report)
        ends = {
            "client": {"local": client_end, "remote": server_end, **gate_times},
            "server": {"local": server_end, "remote": client_end},
        }
        received = end["sum_received"]
        start, stop = report["started_at"], report["ended_at"]
        sender = dict(
            ends[sender_side],
            nbytes=end["sum_sent"]["bytes"],
            connected_at=start,
            buffers={"cc": (end.get("sender_tcp_congestion") or self.cc)},
            tcp_info={"total_retrans": end["sum_sent"].get("retransmits")},
        )
        receiver_side = "client" if sender_side == "server" else "server"
        receiver = dict(
            ends[receiver_side],
            nbytes=received["bytes"],
            connected_at=start,
            first_byte_at=start,
            last_byte_at=start + received["seconds"],
            buffers={},
        )
        intervals = _sender_intervals(data, sender_side)
        return [
            FlowOutcome(
                sender=sender,
                receiver=receiver,
                sender_role=sender_side,
                spec=self,
                reported_bps=received["bits_per_second"],
                details={"iperf3": data, "intervals": intervals, "ended_at": stop},
            )
        ]

    def stop(self):
        self._stop_spawned()


def _sender_intervals(data, sender_side):
    """[{t, bps, retransmits, snd_cwnd, rtt_us}] per interval, from whichever JSON is the sender's."""
    source = data if sender_side == "client" else (data.get("server_output_json") or {})
    rows = []
    for interval in source.get("intervals", []):
        total = interval["sum"]
        streams = interval.get("streams", [])
        rows.append(
            {
                "t": total["end"],
                "bps": total["bits_per_second"],
                "retransmits": total.get("retransmits"),
                "snd_cwnd": sum(s.get("snd_cwnd", 0) for s in streams) or None,
                "rtt_us": max((s.get("rtt", 0) for s in streams), default=0) or None,
            }
        )
    return rows


def _wait_listening(pair, deadline):
    """Block until iperf3 -s listens in the server namespace (read from outside with sock_diag)."""
    from ..netlink.diag import watch_sockets

    found = []

    def check(table):
        if any(s["local"][1] == PORT and s["state"] == 10 for s in table.tcp_sockets()):
            found.append(True)
            return False
        if time.monotonic() > deadline:
            return False
        interrupts.raise_dropped()
        time.sleep(0.005)
        return True

    watch_sockets(pair.server.namespace, check)
    if not found:
        raise LabError("iperf3 -s did not listen before the deadline")


def _cli_json(report):
    """`iperf3 -J`'s JSON from a gated_program report, or {"error": why} where it printed none."""
    try:
        return json.loads(report["stdout"])
    except ValueError:
        return {"error": (report["stderr"] or report["stdout"]).strip() or f"exit {report['returncode']}"}
