"""Bulk TCP sender/receiver run inside a lab namespace; prints JSON lines on stdout.

Run as a script (``python bulk.py serve|connect ...``), never imported by the product at
run time, so it starts fast even in a slow VM: stdlib only, no package import.

Protocol: the server prints {"event": "listening", "port": P} once it listens, then the
receiver prints {"event": "result", ...} when the sender's FIN arrives; the sender prints
its own result (with its final TCP_INFO) once everything it sent is acknowledged.
"""

import argparse
import json
import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tcpinfo import read_tcp_info  # noqa: E402  (sibling module, loaded without the package)

CHUNK = 1 << 20  # 1 MiB per send/recv: few syscalls, so Python is not the bottleneck.
SIOCOUTQ = 0x5411


def _configure(sock, args):
    """Apply the socket options the test asked for, before connect/listen (the window scale depends on it)."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if args.sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, args.sndbuf)
    if args.rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
    if args.cc:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, args.cc.encode())


def _buffers(sock):
    return {"sndbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
            "rcvbuf": sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF),
            "cc": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()}


def _emit(record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _unacked_bytes(sock):
    import fcntl
    import struct
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), SIOCOUTQ, b"\0\0\0\0"))[0]


def send_all(sock, nbytes, connected_at):
    """Send nbytes, then wait until the peer has acknowledged all of it; return the sender's record."""
    payload = memoryview(b"\x5a" * CHUNK)
    remaining = nbytes
    while remaining:
        sent = sock.send(payload[:min(CHUNK, remaining)])
        remaining -= sent
    written_at = time.monotonic()
    sock.shutdown(socket.SHUT_WR)
    # The final TCP_INFO should cover the whole transfer, so wait for the last ACK.
    while _unacked_bytes(sock) > 0:
        time.sleep(0.001)
    acked_at = time.monotonic()
    return {"event": "result", "role": "sender", "nbytes": nbytes, "connected_at": connected_at,
            "written_at": written_at, "acked_at": acked_at, "buffers": _buffers(sock),
            "tcp_info": read_tcp_info(sock)}


def receive_all(sock, connected_at):
    """Read until EOF; return the receiver's record with first/last byte times."""
    buffer = bytearray(CHUNK)
    view = memoryview(buffer)
    received = 0
    first_byte_at = None
    while True:
        n = sock.recv_into(view)
        if not n:
            break
        if first_byte_at is None:
            first_byte_at = time.monotonic()
        received += n
    last_byte_at = time.monotonic()
    return {"event": "result", "role": "receiver", "nbytes": received, "connected_at": connected_at,
            "first_byte_at": first_byte_at, "last_byte_at": last_byte_at, "buffers": _buffers(sock),
            "tcp_info": read_tcp_info(sock)}


class TcpInfoSampler:
    """Samples the sender's TCP_INFO from a thread while the main thread is blocked in send()."""

    FIELDS = ("snd_wnd", "snd_cwnd", "unacked", "rtt", "bytes_acked", "notsent_bytes", "delivery_rate",
              "rwnd_limited", "sndbuf_limited", "busy_time", "total_retrans")

    def __init__(self, sock, interval):
        import threading
        self._sock, self._interval = sock, interval
        self._stop = threading.Event()
        self.samples = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                info = read_tcp_info(self._sock)
            except OSError:
                break
            self.samples.append([time.monotonic()] + [info.get(f) for f in self.FIELDS])
            self._stop.wait(self._interval)

    def stop(self):
        """End sampling; return {"fields": [...], "rows": [[t, ...], ...]}."""
        self._stop.set()
        self._thread.join()
        return {"fields": ["t"] + list(self.FIELDS), "rows": self.samples}


def _run(sock, args, connected_at):
    if args.role == "sender":
        sampler = TcpInfoSampler(sock, args.sample_interval) if args.sample_interval else None
        record = send_all(sock, args.nbytes, connected_at)
        if sampler:
            record["samples"] = sampler.stop()
    else:
        record = receive_all(sock, connected_at)
    sock.close()
    _emit(record)


def serve(args):
    """Listen, accept one connection, play the role."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _configure(listener, args)  # accepted sockets inherit buffers and congestion control
    listener.bind((args.bind, args.port))
    listener.listen(1)
    listener.settimeout(args.timeout)
    _emit({"event": "listening", "port": listener.getsockname()[1], "pid": os.getpid()})
    sock, _ = listener.accept()
    sock.settimeout(None)
    connected_at = time.monotonic()
    listener.close()
    _run(sock, args, connected_at)


def connect(args):
    """Connect, play the role."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    _configure(sock, args)
    sock.settimeout(args.timeout)
    sock.connect((args.to, args.port))
    sock.settimeout(None)
    _run(sock, args, time.monotonic())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["serve", "connect"])
    parser.add_argument("--role", choices=["sender", "receiver"], required=True)
    parser.add_argument("--bind", default="0.0.0.0")
    parser.add_argument("--to")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--nbytes", type=int, default=0)
    parser.add_argument("--sndbuf", type=int)
    parser.add_argument("--rcvbuf", type=int)
    parser.add_argument("--cc")
    parser.add_argument("--sample-interval", type=float, default=0.0,
                        help="sender: sample TCP_INFO every this many seconds (0: only at the end)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the peer to connect")
    args = parser.parse_args(argv)
    (serve if args.mode == "serve" else connect)(args)


if __name__ == "__main__":
    main()
