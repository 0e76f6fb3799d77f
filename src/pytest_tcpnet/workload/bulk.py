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


def hold_unread(sock, connected_at, settle):
    """Never read: let the sender fill our receive buffer, report how much it took once it stops growing.

    What the receive queue holds when the sender is stalled is all the window this socket ever
    offered: the measure of the advertised window for a given SO_RCVBUF (C8, C14).
    """
    import fcntl
    import struct
    queued, stable_since = -1, time.monotonic()
    first_data_at = None
    while True:
        now_queued = struct.unpack("i", fcntl.ioctl(sock.fileno(), 0x541B, b"\0\0\0\0"))[0]  # SIOCINQ
        now = time.monotonic()
        if now_queued and first_data_at is None:
            first_data_at = now
        if now_queued != queued:
            queued, stable_since = now_queued, now
        elif queued > 0 and now - stable_since >= settle:
            break
        if now - connected_at > 60:
            break
        time.sleep(0.002)
    return {"event": "result", "role": "receiver", "mode": "hold", "queued_bytes": queued,
            "connected_at": connected_at, "first_byte_at": first_data_at, "stalled_at": stable_since,
            "buffers": _buffers(sock), "tcp_info": read_tcp_info(sock)}


def send_until_peer_closes(sock, connected_at):
    """Send until the peer goes away (a holding receiver); report the sender's view at that point."""
    payload = memoryview(b"\x5a" * CHUNK)
    sent_total = 0
    info = None
    try:
        while True:
            sent_total += sock.send(payload)
            info = read_tcp_info(sock)
    except OSError:
        pass
    return {"event": "result", "role": "sender", "mode": "until-closed", "nbytes": sent_total,
            "connected_at": connected_at, "buffers": _buffers(sock), "tcp_info": info or {}}


def _run(sock, args, connected_at):
    if args.role == "sender" and args.until_peer_closes:
        record = send_until_peer_closes(sock, connected_at)
    elif args.role == "receiver" and args.hold:
        record = hold_unread(sock, connected_at, args.settle)
    elif args.role == "sender":
        record = send_all(sock, args.nbytes, connected_at)
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
    parser.add_argument("--hold", action="store_true", help="receiver: never read, report the queue once stalled")
    parser.add_argument("--settle", type=float, default=0.3, help="seconds the queue must stay unchanged (--hold)")
    parser.add_argument("--until-peer-closes", action="store_true", help="sender: send until the peer closes")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the peer to connect")
    args = parser.parse_args(argv)
    (serve if args.mode == "serve" else connect)(args)


if __name__ == "__main__":
    main()
