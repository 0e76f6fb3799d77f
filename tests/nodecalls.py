"""Module-level functions for Node.spawn tests: a forked child imports them by name (stdlib only, cheap to import)."""

import os
import socket
import time


def interfaces():
    """The names of the interfaces this process sees (its network namespace's)."""
    return sorted(name for _, name in socket.if_nameindex())


def identity():
    """(pid, parent pid, interfaces)."""
    return os.getpid(), os.getppid(), interfaces()


def fail(message):
    raise ValueError(message)


def sleep_forever():
    time.sleep(3600)


def unpicklable_result():
    return lambda: None


def echo_server(address, port, count=1):
    """Accept `count` connections on address:port; answer each request with it reversed; return what was served."""
    served = []
    with socket.create_server((address, port)) as listener:
        listener.settimeout(30)
        for _ in range(count):
            conn, _ = listener.accept()
            with conn:
                request = conn.recv(65536)
                conn.sendall(request[::-1])
                served.append(request.decode())
    return served


def ask(address, port, text, attempts=200):
    """Connect (retrying while the server starts), send text, return the answer."""
    for _ in range(attempts):
        try:
            conn = socket.create_connection((address, port), timeout=5)
            break
        except ConnectionRefusedError:
            time.sleep(0.01)
    else:
        raise ConnectionRefusedError(f"nothing listens on {address}:{port}")
    with conn:
        conn.sendall(text.encode())
        conn.shutdown(socket.SHUT_WR)
        return conn.recv(65536).decode()


#: A probe's "are you there" datagram: echoed, never counted.
UDP_HELLO = b"\xff\xff\xff\xff"


def udp_echo(address, port, idle_s=3.0):
    """Echo UDP datagrams on (address, port) until none comes for idle_s seconds; return the datagrams it got."""
    got = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind((address, port))
        sock.settimeout(idle_s)
        try:
            while True:
                data, peer = sock.recvfrom(64)
                sock.sendto(data, peer)
                if data != UDP_HELLO:
                    got.append(data)
        except socket.timeout:
            return got


def _await_echo(sock, peer, timeout=20.0):
    """Send hellos until the echo answers one: it is bound (a sleep was not enough beside a CPU hog in the guest)."""
    import select

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.sendto(UDP_HELLO, peer)
        if select.select([sock], [], [], 0.05)[0] and sock.recv(64) == UDP_HELLO:
            return
    raise TimeoutError(f"no UDP echo answered within {timeout} s")


def udp_probe(address, port, count, interval):
    """Send `count` numbered datagrams to an echo, one per `interval` s: [(sent at, RTT or None if lost)] in order.

    The socket is not connected: a connected one takes the ICMP port unreachable of a hello sent
    before the echo bound as an error on a later call (ECONNREFUSED in the middle of the probe,
    beside a CPU hog in the guest); an unconnected one is told nothing of it.
    """
    import select
    import struct

    sent, rtts = [], {}
    peer = (address, port)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        _await_echo(sock, peer)
        end = None
        while end is None or time.monotonic() < end:
            now = time.monotonic()
            if len(sent) < count and (not sent or now >= sent[-1] + interval):
                sock.sendto(struct.pack("!I", len(sent)), peer)
                sent.append(now)
                if len(sent) == count:
                    end = now + 1.0  # the last ones' answers
            if select.select([sock], [], [], 0.0005)[0]:
                data = sock.recv(64)
                if data != UDP_HELLO:  # not a late answer to a hello
                    (n,) = struct.unpack("!I", data)
                    rtts[n] = time.monotonic() - sent[n]
    return [(t, rtts.get(n)) for n, t in enumerate(sent)]


def probe_udp(pair, count=400, interval=0.003, *, arrived=False):
    """[(sent at, RTT or None)] of UDP echoes from a pair's client to its server: what the delay line does to each
    datagram (processes of their own, so no GIL between the probe's clock and its socket). arrived=True: the
    numbers of the datagrams that reached the server instead (a loss on the way there, counted where it shows)."""
    import struct

    echo = pair.server.spawn(udp_echo, pair.server.address, 9300)  # the probe waits until it answers
    probes = pair.client.spawn(udp_probe, pair.server.address, 9300, count, interval).result(timeout=30)
    got = echo.result(timeout=10)
    return {struct.unpack("!I", data)[0] for data in got} if arrived else probes
