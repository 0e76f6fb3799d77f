"""Capture packets on a lab node with dumpcap, confirmed live before the flow starts and flushed after it."""

import functools
import itertools
import re
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from .. import interrupts
from ..errors import LabError, program_path
from ..model.validation import check_integer
from .decode import EVENT_KINDS, count_events, decode_pcap, endpoint_text

__all__ = ["Capture", "CaptureResult", "DEFAULT_SNAPLEN", "SETTLE_S"]

#: Bytes kept per packet: Ethernet (14) + IPv4 with options (60) + TCP with options (60) fit in 134;
#: tshark takes segment lengths from the IP header, so payload is never needed.
DEFAULT_SNAPLEN = 134
#: dumpcap opens interfaces with a 250 ms read timeout, which libpcap's TPACKET_V3 ring uses as block timeout.
_BLOCK_TIMEOUT_S = 0.25
#: How long the file must stop growing before stop() sends SIGINT by default: past the block timeout, so the last
#: block reaches the file.
SETTLE_S = _BLOCK_TIMEOUT_S + 0.15
#: How long stop() waits at most for dumpcap to write what the kernel already handed it: a slow guest's dumpcap
#: runs seconds behind, and what is still in its ring at SIGINT is lost (docs/capture.md).
DRAIN_LIMIT_S = 15.0
_numbering = itertools.count()
_DROPS = re.compile(r"Packets received/dropped on interface '[^']*': (\d+)/(\d+)")


def dumpcap_path():
    """Path of Wireshark's dumpcap (what tshark itself uses to capture)."""
    return program_path(
        "dumpcap", package="tshark", capability="tshark", description="dumpcap (Wireshark's capture engine)"
    )


class Capture:
    """Packets seen on one interface of a lab node, written to a pcap; use ``with`` or start()/stop().

    The default interface is the node's lab interface: capture on the sender (the server for a
    download) so Wireshark's window-full analysis sees the window as the sender did. filter is a
    capture (BPF) filter, "tcp" by default; snaplen keeps headers only.
    """

    def __init__(
        self, node, *, interface=None, filter="tcp", snaplen=DEFAULT_SNAPLEN, directory=None, ready_timeout=60.0
    ):
        for attribute in ("namespace", "interface", "role", "popen", "processes"):
            if not hasattr(node, attribute):
                raise TypeError(f"node: expected a lab Node (pair.client, pair.router, pair.server), got {node!r}")
        check_integer("snaplen", snaplen, 68, 262144, must="an int in 68..262144 bytes (headers need >= 68)")
        if filter is not None and (not isinstance(filter, str) or "\n" in filter):
            raise ValueError(f"filter: must be a one-line capture (BPF) filter such as 'tcp port 5201', got {filter!r}")
        if interface is not None and (not isinstance(interface, str) or not re.fullmatch(r"[\w.@-]{1,15}", interface)):
            raise ValueError(f"interface: must be an interface name of the node's namespace, got {interface!r}")
        self.node = node
        self.interface = interface or node.interface
        self.filter = filter
        self.snaplen = snaplen
        self.point = f"{node.role}/{self.interface}"
        self.directory = Path(directory) if directory is not None else None
        # Only a dumpcap that hangs waits this long (one that exits ends the wait at once): a slow start under
        # software emulation beside a busy host must not read as a failure (docs/capture.md).
        self.ready_timeout = ready_timeout
        self.pcap = None
        self.result = None
        self._proc = None
        self._stderr = []
        self._ready = threading.Event()
        self._opened = False
        self._reader = None

    def start(self):
        """Start dumpcap in the node's namespace; return once it reports the capture file open."""
        if self._proc is not None:
            raise LabError("this capture was already started; make a new Capture for another one")
        directory = self.directory or Path(tempfile.mkdtemp(prefix="tcpnet-capture-"))
        directory.mkdir(parents=True, exist_ok=True)
        self.pcap = directory / f"{self.node.namespace}-{self.interface}-{next(_numbering)}.pcap"
        argv = [dumpcap_path(), "-i", self.interface, "-s", str(self.snaplen), "-P", "-w", str(self.pcap)]
        if self.filter:
            argv += ["-f", self.filter]
        self._proc = self.node.popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        self._reader = threading.Thread(target=self._read_stderr, name=f"dumpcap {self.point}", daemon=True)
        self._reader.start()
        # dumpcap prints "File: ..." once the interface is open with its filter and the file is created.
        if not interrupts.wait(self._ready.wait, self.ready_timeout) or not self._opened:
            self.node.processes.stop(self._proc)
            self._reader.join(timeout=2)
            raise LabError(
                f"dumpcap did not start capturing on {self.point} within {self.ready_timeout} s: "
                f"{''.join(self._stderr).strip() or 'no output'}"
            )
        return self

    def _read_stderr(self):
        try:
            for line in self._proc.stderr:
                self._stderr.append(line)
                if line.startswith("File:"):
                    self._opened = True
                    self._ready.set()
        except (ValueError, OSError):
            pass  # stop() closed the pipe while this thread still read it: dumpcap has nothing more to say
        self._ready.set()  # exited: let start() see it

    def stop(self, *, settle=SETTLE_S):
        """Stop dumpcap by pid (SIGINT: it writes what it holds and closes the file); return the CaptureResult.

        settle (seconds) must exceed libpcap's block timeout: the kernel hands packets to dumpcap
        in blocks that are released when full or 250 ms after their first packet, and a block
        still open at SIGINT is lost (docs/capture.md has the measurement). The file must not grow
        for that long (at most DRAIN_LIMIT_S): a dumpcap behind its ring (a one-CPU guest) writes on.
        """
        if self._proc is None:
            raise LabError("this capture was never started")
        if self.result is not None:
            return self.result
        self._wait_drained(settle)
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGINT)
            interrupts.wait(lambda seconds: _exited(self._proc, seconds), 10)
        exit_code = self._proc.poll()
        self.node.processes.stop(self._proc)  # no-op when it has exited; SIGKILLs a hung one
        self._reader.join(timeout=5)
        stderr = "".join(self._stderr)
        if exit_code not in (0, None) or not self.pcap.exists():
            raise LabError(f"dumpcap on {self.point} failed (exit {exit_code}): {stderr.strip()}")
        match = _DROPS.search(stderr)
        self.result = CaptureResult(
            pcap=self.pcap,
            point=self.point,
            filter=self.filter,
            snaplen=self.snaplen,
            received=int(match.group(1)) if match else None,
            dropped=int(match.group(2)) if match else None,
        )
        return self.result

    def _wait_drained(self, settle):
        """Return once the pcap has not grown for `settle` seconds (dumpcap has written every block the kernel
        handed it), after DRAIN_LIMIT_S at most, or at once if dumpcap has exited."""
        start = changed = time.monotonic()
        size = -1
        while self._proc.poll() is None:
            now = time.monotonic()
            grown = self.pcap.stat().st_size if self.pcap.exists() else 0
            if grown != size:
                size, changed = grown, now
            elif now - changed >= settle:
                return
            if now - start >= DRAIN_LIMIT_S:
                return
            time.sleep(min(0.05, settle))

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        if self._proc is not None and self.result is None:
            self.stop()

    def __repr__(self):
        return f"<Capture {self.point} filter={self.filter!r} pcap={self.pcap}>"


class CaptureResult:
    """A finished capture: the pcap, where it was taken, and tshark's decoding of it (lazily, once)."""

    def __init__(self, pcap, point, filter=None, snaplen=None, received=None, dropped=None):
        self.pcap = Path(pcap)
        self.point = point
        self.filter = filter
        self.snaplen = snaplen
        self.received = received  # packets dumpcap reported from the interface
        self.dropped = dropped  # packets the capture itself dropped (buffer overflow): nonzero means gaps

    @functools.cached_property
    def packets(self):
        """Per-packet records (capture.decode.Packet), decoded by tshark on first use."""
        return decode_pcap(self.pcap)

    @property
    def missing(self):
        """Packets the kernel handed the capture that its file lacks: dropped by dumpcap, or held in a block lost when
        it stopped (received counts both); None where dumpcap gave no counts. Counted over the whole capture: which
        connection they belonged to is unknown."""
        if self.received is None or self.dropped is None:
            return None
        return max(self.dropped, self.received - len(self._all_packets))

    @property
    def _all_packets(self):
        return self.packets

    def for_connection(self, local, remote):
        """The same capture seen through one TCP connection's packets only (decoded once, shared)."""
        return ConnectionCapture(self, local, remote)

    @functools.cached_property
    def events(self):
        """{kind: count} of TCP expert events: window_full, zero_window, retransmission, ..."""
        return count_events(self.packets)

    def offending(self, kind, n=5):
        """The first n packets flagged with event kind."""
        if kind not in EVENT_KINDS:
            raise ValueError(f"kind: must be one of {', '.join(EVENT_KINDS)}, got {kind!r}")
        return list(itertools.islice((p for p in self.packets if kind in p.expert), n))

    @property
    def data_segments(self):
        """Packets of the data direction that carry payload (retransmissions included)."""
        return sum(1 for p in self.packets if p.direction == "data" and p.len > 0)

    @property
    def data_bytes(self):
        """Payload bytes of the data direction, from the highest sequence number sent (relative, so from 1)."""
        return max((p.seq + p.len - 1 for p in self.packets if p.direction == "data" and p.len > 0), default=0)

    @property
    def resent_segments(self):
        """Segments sent again: tshark's Retransmission plus Out-Of-Order (its name for a resend that
        follows the previous segment by less than an RTT, as fast retransmissions on short paths do)."""
        return self.events["retransmission"] + self.events["out_of_order"]

    @property
    def segments_in_flight(self):
        """Mean full-sized segments in flight when a data segment left (tshark's bytes in flight / the largest
        payload seen); None without data segments. A lost segment draws about this many duplicate ACKs."""
        data = [p for p in self.packets if p.direction == "data" and p.len > 0 and p.bytes_in_flight is not None]
        if not data:
            return None
        mss = max(p.len for p in data)
        return sum(p.bytes_in_flight for p in data) / len(data) / mss

    def rate(self, kind):
        """Events of kind per data segment sent (e.g. 0.01 when 1 segment in 100 was retransmitted)."""
        return self.events[kind] / max(1, self.data_segments)

    def describe(self):
        """Where and how the capture was taken, and what it holds, one per line."""
        counts = ", ".join(f"{k} {v}" for k, v in self.events.items() if v) or "no expert events"
        missing = self.missing
        drops = "" if missing is None else f", {missing} missing (dumpcap: {self.received} from the kernel)"
        return (
            f"capture at {self.point} (filter {self.filter!r}, snaplen {self.snaplen}): "
            f"{len(self.packets)} packets, {self.data_segments} data segments{drops}\n"
            f"events: {counts}\npcap: {self.pcap}"
        )

    @property
    def capture(self):
        """Itself, so assertions and plots accept a CaptureResult where they take a transfer result."""
        return self

    def __repr__(self):
        return f"<CaptureResult {self.point} {self.pcap}>"


class ConnectionCapture(CaptureResult):
    """One connection's packets of a capture: events, rates and failure messages count only those."""

    def __init__(self, whole, local, remote):
        super().__init__(whole.pcap, whole.point, whole.filter, whole.snaplen, whole.received, whole.dropped)
        self.whole = whole
        self.connection = (_endpoint(local), _endpoint(remote))

    @property
    def _all_packets(self):
        return self.whole.packets

    @functools.cached_property
    def packets(self):
        ends = set(self.connection)
        return [p for p in self.whole.packets if {p.src, p.dst} == ends]

    def describe(self):
        return (
            super()
            .describe()
            .replace("\npcap:", f"\nconnection: {self.connection[0]} <-> {self.connection[1]}\npcap:", 1)
        )


def _endpoint(address_port):
    """'addr:port' ('[addr]:port' for IPv6), as decoded packets spell their ends."""
    return endpoint_text(*address_port[:2])


def _exited(proc, seconds):
    """True once proc has exited, waiting up to `seconds`."""
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        return False
    return True
