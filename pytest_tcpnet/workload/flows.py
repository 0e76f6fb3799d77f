"""The code that runs inside lab namespaces, in forked children: bulk endpoints, an HTTP server, a CPU hog.

Stdlib and the pure model only: it is preloaded by the forkserver and must import fast.
Every function takes the pipe end `conn` first and reports dict messages on it.
"""

import fcntl
import http.server
import os
import signal
import socket
import struct
import time

from ..model.app import Pace, Pause
from ..model.tcpinfo import decode_tcp_info, field_reader

__all__ = [
    "bulk_endpoint",
    "http_server",
    "cpu_hog",
    "rtt_echo_server",
    "rtt_probe_client",
    "PROBE_BYTES",
    "rr_server",
    "rr_client",
    "udp_sink",
    "udp_cbr_sender",
    "gated_program",
]

CHUNK = 1 << 20  # 1 MiB per send/recv: few syscalls, so Python is not the bottleneck
CHECKPOINT_INTERVAL = 0.005  # receiver's (time, bytes) record: fine enough for 10 ms rate series
_SIOCOUTQ = 0x5411
_PAYLOAD = memoryview(b"\x5a" * CHUNK)


def read_tcp_info(sock):
    """getsockopt(TCP_INFO) on a connected TCP socket, decoded."""
    return decode_tcp_info(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 512))


def _payload(size):
    """`size` bytes to send, from the shared 1 MiB buffer (or a bigger one for bigger writes)."""
    return _PAYLOAD[:size] if size <= CHUNK else memoryview(b"\x5a" * size)


def _configure(sock, sndbuf, rcvbuf, cc):
    """Socket options before connect/listen: the window scale is chosen from the buffer at SYN time."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    if cc:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())


def _buffers(sock):
    return {
        "sndbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
        "rcvbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
        "cc": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode(),
    }


def _unacked_bytes(sock):
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), _SIOCOUTQ, b"\0\0\0\0"))[0]


def _sleep_until(moment):
    delay = moment - time.monotonic()
    if delay > 0:
        time.sleep(delay)


class _Gate:
    """Applies a Pace or Pause spec to a loop that moves bytes: how much to move next, sleeping as the spec says."""

    def __init__(self, spec):
        self.spec, self.started, self.tick, self.paused, self.pauses = spec, time.monotonic(), 0, False, []

    def next_size(self, done, want):
        """The most bytes to move now, after `done` so far; may sleep first (a pause, or the pace's next tick)."""
        spec = self.spec
        if isinstance(spec, Pause) and not self.paused:
            if done >= spec.after:
                paused_at = time.monotonic()
                time.sleep(spec.seconds)
                self.pauses.append((paused_at, time.monotonic()))
                self.paused = True
            else:
                want = min(want, spec.after - done)
        elif isinstance(spec, Pace):
            _sleep_until(self.started + self.tick / spec.per_second)
            self.tick += 1
            want = min(want, spec.chunk)
        return want


def _send(sock, nbytes, duration, writer, write_size=CHUNK):
    """Send nbytes (or for duration seconds) in writes of at most write_size, as the writer spec allows.

    Returns (sent, first_write_at, pauses).
    """
    sent, first_write_at, gate = 0, None, _Gate(writer)
    end_at = time.monotonic() + duration if duration else None
    while True:
        if end_at is not None:
            now = time.monotonic()
            if now >= end_at:
                break
            # A blocking 1 MiB send can take seconds at low rates; a timeout lets the deadline cut it short.
            sock.settimeout(max(0.001, end_at - now))
        want = gate.next_size(sent, write_size if nbytes is None else min(write_size, nbytes - sent))
        if want <= 0:
            break
        if first_write_at is None:
            # Before the call: a blocking 1 MiB write into a small send buffer returns only once most of it is sent.
            first_write_at = time.monotonic()
        try:
            n = sock.send(_payload(want))
        except socket.timeout:
            continue
        sent += n
    sock.settimeout(None)
    return sent, first_write_at, gate.pauses


def _receive(sock, reader, read_size=CHUNK):
    """Read until EOF as the reader spec allows; return the receiver's counters and (time, bytes) checkpoints."""
    view = memoryview(bytearray(max(CHUNK, read_size)))
    received, first_byte_at, first_read, gate = 0, None, 0, _Gate(reader)
    checkpoints, last_checkpoint, now = [], 0.0, None
    while True:
        n = sock.recv_into(view, gate.next_size(received, read_size))
        if not n:
            break
        now = time.monotonic()
        if first_byte_at is None:
            first_byte_at, first_read = now, n
            checkpoints.append((now, 0))
        received += n
        if now - last_checkpoint >= CHECKPOINT_INTERVAL:
            checkpoints.append((now, received))
            last_checkpoint = now
    last_byte_at = time.monotonic() if first_byte_at is None else now
    if received and checkpoints[-1][1] != received:
        checkpoints.append((last_byte_at, received))
    return {
        "nbytes": received,
        "first_byte_at": first_byte_at,
        "first_read": first_read,
        "last_byte_at": last_byte_at,
        "checkpoints": checkpoints,
        "pauses": gate.pauses,
    }


def _play(conn, sock, role, nbytes, duration, reader, writer, read_size, write_size, gate_times=None):
    """Run one end of a flow on a connected socket and report its record (with gate_times: when it came to the
    start gate and went through, wait_at_start_gate's)."""
    connected_at = time.monotonic()
    # (address, port): an IPv6 socket's names also carry flow info and scope id.
    conn.send(
        {
            "event": "connected",
            "local": sock.getsockname()[:2],
            "remote": sock.getpeername()[:2],
            "buffers": _buffers(sock),
            "at": connected_at,
        }
    )
    record = {"event": "result", "role": role, "connected_at": connected_at, **(gate_times or {})}
    if role == "sender":
        sent, first_write_at, pauses = _send(sock, nbytes, duration, writer, write_size)
        record.update(nbytes=sent, first_write_at=first_write_at, written_at=time.monotonic(), pauses=pauses)
        sock.shutdown(socket.SHUT_WR)
        # The final TCP_INFO should cover the whole transfer, so wait for the last ACK.
        while _unacked_bytes(sock) > 0:
            time.sleep(0.001)
        record["acked_at"] = time.monotonic()
    else:
        record.update(_receive(sock, reader, read_size))
    record.update(buffers=_buffers(sock), tcp_info=read_tcp_info(sock))
    sock.close()
    conn.send(record)


def _family(address):
    """AF_INET6 for an IPv6 address, else AF_INET."""
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def wait_at_start_gate(conn, path, timeout):
    """Report "gated", then wait until the measurement opens the start gate at `path` (measure.gate.StartGate: a
    FIFO, whose open() to read waits for a writer); TimeoutError after `timeout` seconds. Returns {"gated_at",
    "released_at"}: when this end came to the gate and when it went through (monotonic); {} without a gate (None)."""
    if path is None:
        return {}
    gated_at = time.monotonic()
    conn.send({"event": "gated"})

    def expire(signum, frame):
        raise TimeoutError(f"the start gate {path} was not opened in {timeout:.3g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        os.close(os.open(path, os.O_RDONLY))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return {"gated_at": gated_at, "released_at": time.monotonic()}


def gate_times_of(report):
    """The start gate's times a child's report carries (wait_at_start_gate's), {} where it waited at none."""
    return {name: report[name] for name in ("gated_at", "released_at") if name in report}


def bulk_endpoint(
    conn,
    *,
    mode,
    role,
    address,
    port=0,
    nbytes=None,
    duration=None,
    sndbuf=None,
    rcvbuf=None,
    cc=None,
    reader=None,
    writer=None,
    read_size=CHUNK,
    write_size=CHUNK,
    start_delay=0.0,
    timeout=60.0,
    start_gate=None,
):
    """One end of a bulk flow: mode 'serve' listens on address (reports the port), 'connect' dials address:port.

    start_gate: a StartGate's path to wait at (wait_at_start_gate): a client with a start_delay waits before it,
    any other end once connected, before it moves data."""
    gate_times = {}
    if start_gate is not None and start_delay:
        gate_times = wait_at_start_gate(conn, start_gate, timeout)
        start_gate = None
    if mode == "serve":
        listener = socket.socket(_family(address), socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _configure(listener, sndbuf, rcvbuf, cc)  # accepted sockets inherit buffers and congestion control
        listener.bind((address, port))
        listener.listen(1)
        listener.settimeout(timeout)
        conn.send({"event": "listening", "port": listener.getsockname()[1]})
        sock, _ = listener.accept()
        listener.close()
    else:
        if start_delay:
            time.sleep(start_delay)
        sock = socket.socket(_family(address), socket.SOCK_STREAM)
        _configure(sock, sndbuf, rcvbuf, cc)
        sock.settimeout(timeout)
        sock.connect((address, port))
    sock.settimeout(None)
    if start_gate is not None:
        gate_times = wait_at_start_gate(conn, start_gate, timeout)
    _play(conn, sock, role, nbytes, duration, reader, writer, read_size, write_size, gate_times)


#: A latency probe's request and response: small enough to fit any window, one segment each way.
PROBE_BYTES = 64


def _read_exactly(sock, view):
    """Fill view from sock; False at EOF."""
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if not n:
            return False
        got += n
    return True


# Linux's SO_TIMESTAMPNS (asm-generic/socket.h; the stdlib does not name it): recvmsg then carries, for TCP too,
# the kernel's CLOCK_REALTIME receive time of the data read, as a struct timespec.
_SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@ll")
_HOLD = struct.Struct("<q")  # the echo server's hold time (ns) in the first bytes of its answer


def _read_stamped(sock, view):
    """Fill view from sock; the kernel's receive time (ns, CLOCK_REALTIME) of the last byte, 0 if unstamped,
    or None at EOF."""
    got, stamp = 0, 0
    while got < len(view):
        n, ancillary, _, _ = sock.recvmsg_into([view[got:]], socket.CMSG_SPACE(_TIMESPEC.size))
        if not n:
            return None
        got += n
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
                seconds, nanoseconds = _TIMESPEC.unpack_from(data)
                stamp = seconds * 1_000_000_000 + nanoseconds
    return stamp


def _ask_for_stamps(sock):
    """Kernel receive timestamps on sock; False where the kernel refuses them."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        return True
    except OSError:
        return False


def rtt_echo_server(conn, *, address, timeout=60.0):
    """The far end of a latency probe: answers each PROBE_BYTES request at once, until EOF, writing into each
    answer how long the request waited here (kernel receive to reply), so the probe can take that out."""
    listener = socket.socket(_family(address), socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((address, 0))
    listener.listen(1)
    listener.settimeout(timeout)
    conn.send({"event": "listening", "port": listener.getsockname()[1]})
    sock, _ = listener.accept()
    listener.close()
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _ask_for_stamps(sock)
    buffer = bytearray(PROBE_BYTES)
    view = memoryview(buffer)
    answered = 0
    while (received_at := _read_stamped(sock, view)) is not None:
        _HOLD.pack_into(buffer, 0, time.time_ns() - received_at if received_at else 0)
        sock.sendall(view)
        answered += 1
    sock.close()
    conn.send({"event": "result", "answered": answered})


def rtt_probe_client(conn, *, address, port, interval, duration, timeout=60.0):
    """A latency probe: every `interval` s (or as soon as the previous answer came, when later) send a request on
    one TCP_NODELAY connection and time its answer; reports [(sent_at, network_rtt_s, app_rtt_s)], sent_at on the
    monotonic clock. The network RTT is ping's: from the send to the kernel's receive time of the answer, less
    the time the echo server held the request (both ends' wake-ups are the machine's, not the path's: a few
    milliseconds in an emulated VM beside a busy CPU); without kernel timestamps it is the application's."""
    sock = socket.socket(_family(address), socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    stamped = _ask_for_stamps(sock)
    sock.settimeout(timeout)
    sock.connect((address, port))
    conn.send(
        {
            "event": "connected",
            "local": sock.getsockname()[:2],
            "remote": sock.getpeername()[:2],
            "at": time.monotonic(),
        }
    )
    request, buffer = _PAYLOAD[:PROBE_BYTES], bytearray(PROBE_BYTES)
    view = memoryview(buffer)
    started = time.monotonic()
    samples, next_at, end_at = [], started, started + duration
    while next_at < end_at:
        _sleep_until(next_at)
        sent_at, sent_ns = time.monotonic(), time.time_ns()
        sock.sendall(request)
        received_ns = _read_stamped(sock, view)
        if received_ns is None:
            break
        answered_at = time.monotonic()
        app_rtt = answered_at - sent_at
        (held_ns,) = _HOLD.unpack_from(buffer)
        network_rtt = (received_ns - sent_ns - held_ns) / 1e9 if received_ns and stamped else app_rtt
        # A realtime clock step between the two readings would show as an absurd value: keep the application's.
        samples.append((sent_at, network_rtt if 0 < network_rtt <= app_rtt else app_rtt, app_rtt))
        # Closed loop, as flent's request/response tests: a late answer delays the next request, never stacks them.
        next_at = max(next_at + interval, answered_at)
    sock.shutdown(socket.SHUT_WR)
    sock.close()
    conn.send({"event": "result", "samples": samples, "started_at": started, "stamped": stamped})


def _send_all(sock, nbytes, write_size=CHUNK, after_write=None):
    """Write nbytes of payload in writes of at most write_size; returns when the last byte is in the send buffer.
    after_write(sock): called after each write."""
    left = nbytes
    while left:
        left -= sock.send(_payload(min(write_size, left)))
        if after_write is not None:
            after_write(sock)


_SRTT_BYTES, _srtt_of = field_reader("rtt")


def rr_server(
    conn, *, address, request_size, response_size, sndbuf=None, rcvbuf=None, cc=None, connections=1, timeout=60.0
):
    """A request/response server: on each of `connections` connections, answer every request_size-byte request
    with response_size bytes, until the client closes it."""
    listener = socket.socket(_family(address), socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _configure(listener, sndbuf, rcvbuf, cc)
    listener.bind((address, 0))
    listener.listen(16)
    listener.settimeout(timeout)
    conn.send({"event": "listening", "port": listener.getsockname()[1]})
    view = memoryview(bytearray(request_size))
    answered, tcp_info, srtt_means = 0, [], []
    for _ in range(connections):
        sock, _ = listener.accept()
        sock.settimeout(None)
        srtts = []

        def note_srtt(sock, srtts=srtts):
            srtts.append(_srtt_of(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _SRTT_BYTES)))

        while _read_exactly(sock, view):
            # Writes no larger than a set send buffer, as a server sizing its writes to it: the buffer bounds
            # what is in flight (one larger write would overshoot it, C11). The srtt after each write: its mean
            # is the round trip the response paid, where the final srtt weighs only its last few rounds.
            _send_all(sock, response_size, min(CHUNK, sndbuf) if sndbuf else CHUNK, note_srtt)
            answered += 1
        tcp_info.append(read_tcp_info(sock))
        srtt_means.append(sum(srtts) / len(srtts) if srtts else None)
        sock.close()
    listener.close()
    conn.send({"event": "result", "answered": answered, "tcp_info": tcp_info, "srtt_means_us": srtt_means})


def rr_client(
    conn,
    *,
    address,
    port,
    count,
    request_size,
    response_size,
    new_connection,
    interval=0.0,
    rcvbuf=None,
    timeout=60.0,
    start_gate=None,
):
    """Send `count` requests and read each response whole, on one connection or a new one each; reports per
    request its times on the monotonic clock: started (before connect, if any), connected, first byte, done.
    start_gate: a StartGate's path to wait at before the first request (wait_at_start_gate)."""
    view = memoryview(bytearray(max(CHUNK, response_size)))
    gate_times = wait_at_start_gate(conn, start_gate, timeout)
    records, sock, next_at = [], None, time.monotonic()
    for _ in range(count):
        _sleep_until(next_at)
        started = time.monotonic()
        if sock is None:
            sock = socket.socket(_family(address), socket.SOCK_STREAM)
            _configure(sock, None, rcvbuf, None)
            sock.settimeout(timeout)
            sock.connect((address, port))
            sock.settimeout(None)
        connected = time.monotonic()
        sock.sendall(_payload(request_size))
        got, first_byte = 0, None
        while got < response_size:
            n = sock.recv_into(view, min(len(view), response_size - got))
            if not n:
                raise ConnectionError(f"the server closed the connection after {got} of {response_size} bytes")
            if first_byte is None:
                first_byte = time.monotonic()
            got += n
        done = time.monotonic()
        records.append({"started": started, "connected": connected, "first_byte": first_byte, "done": done})
        if new_connection:
            sock.close()
            sock = None
        next_at = started + interval
    if sock is not None:
        sock.close()
    conn.send({"event": "result", "requests": records, **gate_times})


_CBR_HEADER = struct.Struct("!Id")  # sequence number, send time (monotonic s); 0xFFFFFFFF: the end
_CBR_END = 0xFFFFFFFF


def udp_sink(conn, *, address, timeout=60.0):
    """Receive a CBR stream on a UDP socket until its end marker (or `timeout` s of silence); reports
    [(seq, sent_at, received_at)] and the datagrams' size."""
    sock = socket.socket(_family(address), socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)  # a burst after a stall must not overflow here
    sock.bind((address, 0))
    conn.send({"event": "listening", "port": sock.getsockname()[1]})
    sock.settimeout(timeout)
    arrivals, size, buffer = [], 0, bytearray(65536)
    while True:
        try:
            n = sock.recv_into(buffer)
        except socket.timeout:
            break
        received_at = time.monotonic()
        seq, sent_at = _CBR_HEADER.unpack_from(buffer)
        if seq == _CBR_END:
            break
        arrivals.append((seq, sent_at, received_at))
        size = n
    sock.close()
    conn.send({"event": "result", "arrivals": arrivals, "size": size})


def udp_cbr_sender(conn, *, address, port, rate, duration, packet_size, start_delay=0.0, start_gate=None, timeout=60.0):
    """Send packet_size-byte datagrams at `rate` bit/s of payload for `duration` s, each stamped with its sequence
    number and send time; on schedule (a late datagram goes at once, the next ones keep the schedule). start_gate:
    a StartGate's path to wait at first (wait_at_start_gate)."""
    wait_at_start_gate(conn, start_gate, timeout)
    if start_delay:
        time.sleep(start_delay)
    # Unconnected: a connected UDP socket reports a late ICMP port-unreachable (the sink gone after the end
    # marker) as ECONNREFUSED on the next send.
    sock = socket.socket(_family(address), socket.SOCK_DGRAM)
    target = (address, port)
    payload = bytearray(_PAYLOAD[:packet_size])
    gap = packet_size * 8 / rate
    started = time.monotonic()
    count = int(duration / gap)
    sent = errors = 0
    for seq in range(count):
        _sleep_until(started + seq * gap)
        _CBR_HEADER.pack_into(payload, 0, seq, time.monotonic())
        try:
            sock.sendto(payload, target)
            sent += 1
        except OSError:  # ENOBUFS: the local queue was full, the datagram never left
            errors += 1
    ended = time.monotonic()
    for _ in range(3):  # the end marker, thrice: a lost marker would leave the sink waiting for its timeout
        _CBR_HEADER.pack_into(payload, 0, _CBR_END, time.monotonic())
        sock.sendto(payload[: _CBR_HEADER.size], target)
        time.sleep(0.01)
    sock.close()
    conn.send({"event": "result", "sent": sent, "send_errors": errors, "started_at": started, "ended_at": ended})


class _BytesHandler(http.server.BaseHTTPRequestHandler):
    """GET /<n> answers n bytes; nothing is read from disk."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        try:
            size = int(self.path.strip("/"))
        except ValueError:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        remaining = size
        while remaining:
            remaining -= self.wfile.write(_PAYLOAD[: min(CHUNK, remaining)])
        self.wfile.flush()

    def log_message(self, *args):
        pass


def http_server(conn, *, address, sndbuf=None, cc=None):
    """An HTTP/1.1 server answering GET /<n> with n bytes, until stopped."""

    class Server(http.server.HTTPServer):
        address_family = _family(address)

        def server_bind(self):
            _configure(self.socket, sndbuf, None, cc)
            super().server_bind()

    server = Server((address, 0), _BytesHandler)
    conn.send({"event": "listening", "port": server.server_address[1]})
    server.serve_forever()


def cpu_hog(conn):
    """Spin on the CPU this process was pinned to, until stopped (C10's competing load)."""
    conn.send({"event": "spinning", "pid": os.getpid()})
    while True:
        pass


def _listening(port):
    """True once this namespace has a TCP socket listening on `port` (/proc/net/tcp or tcp6, state 0A)."""
    for name in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(name) as table:
                rows = list(table)[1:]
        except FileNotFoundError:  # a kernel without IPv6 (a module not loaded) has no tcp6 table
            continue
        if any(line.split()[1].endswith(f":{port:04X}") and line.split()[3] == "0A" for line in rows):
            return True
    return False


def _announce_when_listening(conn, port, deadline):
    import threading

    def watch():
        while time.monotonic() < deadline:
            if _listening(port):
                conn.send({"event": "listening", "port": port})
                return
            time.sleep(0.005)

    threading.Thread(target=watch, daemon=True).start()


def iperf3_server(conn, *, address, port, timeout=60.0):
    """One iperf3 test as the server, through libiperf (the PyPI iperf3 bindings)."""
    import iperf3

    server = iperf3.Server()
    server.bind_address, server.port = address, port
    _announce_when_listening(conn, port, time.monotonic() + timeout)
    # iperf_run_server directly: the bindings' Server.run pipes stdout and can block on a full pipe.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    error = server.lib.iperf_run_server(server._test)
    conn.send({"event": "result", "error": error})


def iperf3_client(
    conn, *, address, port, duration, reverse, cc=None, window=None, parallel=1, start_gate=None, timeout=60.0
):
    """One iperf3 test as the client; reports iperf3's JSON (with the server's, for the sender's cwnd and rtt).
    start_gate: a StartGate's path to wait at, libiperf loaded and the test set up, before it connects."""
    import ctypes
    import json

    import iperf3

    client = iperf3.Client()
    client.server_hostname, client.port, client.duration = address, port, int(duration)
    client.num_streams, client.protocol, client.json_output = parallel, "tcp", True
    client.reverse = reverse
    lib, test = client.lib, client._test
    lib.iperf_set_test_get_server_output.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.iperf_set_test_get_server_output(test, 1)
    if cc:
        lib.iperf_set_test_congestion_control.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.iperf_set_test_congestion_control(test, cc.encode())
    if window:
        lib.iperf_set_test_socket_bufsize.argtypes = [ctypes.c_void_p, ctypes.c_int]
        lib.iperf_set_test_socket_bufsize(test, window)
    gate_times = wait_at_start_gate(conn, start_gate, timeout)
    started_at = time.monotonic()
    result = client.run()
    conn.send(
        {
            "event": "result",
            **gate_times,
            "started_at": started_at,
            "ended_at": time.monotonic(),
            "json": result.json if result.json else json.loads(result.text),
        }
    )


_PR_SET_PDEATHSIG = 1


def _dies_with_this_process():
    """A preexec_fn: the program gets SIGKILL when the process that started it goes, however it goes (a stopped
    workload's child is signalled alone: without this its program ran on, even past the lab's teardown)."""
    import ctypes

    prctl, parent = ctypes.CDLL(None).prctl, os.getpid()

    def prepare():
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent went before the request took hold
            os._exit(1)

    return prepare


def gated_program(conn, *, argv, start_gate=None, timeout=60.0):
    """Run a program (curl, `iperf3 -J` where the bindings cannot load) once the measurement's start gate opens;
    report its exit status and output with when it ran. start_gate: a StartGate's path to wait at first (a
    client's: it connects once every workload has started). The program is killed with this process."""
    import subprocess

    gate_times = wait_at_start_gate(conn, start_gate, timeout)
    started_at = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, preexec_fn=_dies_with_this_process())
    conn.send(
        {
            "event": "result",
            **gate_times,
            "started_at": started_at,
            "ended_at": time.monotonic(),
            "returncode": done.returncode,
            "stdout": done.stdout,
            "stderr": done.stderr,
        }
    )
