"""A stand-in for a user's program, for the benchmarks: a stdlib sender and receiver run with Node.spawn."""

import socket
import time

BLOCK = 1 << 20


def receive(address, port, nbytes):
    """Accept one connection on (address, port), read nbytes; return its own goodput (bit/s, first to last byte)."""
    with socket.create_server((address, port)) as listener:
        conn, _ = listener.accept()
        with conn:
            got, first = 0, None
            while got < nbytes:
                data = conn.recv(BLOCK)
                if not data:
                    break
                if first is None:
                    first, counted = time.monotonic(), len(data)  # the first read is not timed
                got += len(data)
            return (got - counted) * 8 / (time.monotonic() - first)


def send(address, port, nbytes):
    """Connect to (address, port) (the receiver may still be starting) and send nbytes."""
    for _ in range(1000):
        try:
            sock = socket.create_connection((address, port))
            break
        except ConnectionRefusedError:
            time.sleep(0.005)
    with sock:
        block = b"b" * BLOCK
        left = nbytes
        while left:
            left -= sock.send(block[: min(left, BLOCK)])


def nothing():
    """What a spawn costs with no work in it."""
    return None
