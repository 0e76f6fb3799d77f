"""chunkup: a chunked upload with application acknowledgements, and the time budget it promises.

The client sends `nbytes` in chunks of `chunk` bytes and keeps at most `window` chunks without
the server's acknowledgement; the server answers every chunk with an 8-byte count of the bytes it
has taken in. A window of 1 is stop-and-wait. Both ends may set their own socket buffers.

    python -m chunkup serve ADDRESS PORT [--rcvbuf N]
    python -m chunkup upload ADDRESS PORT NBYTES [--chunk N] [--window N] [--sndbuf N]

It knows nothing of pytest-tcpnet: its tests (tests/) measure it with the plugin.
"""

import socket
import struct
import time

HEADER = struct.Struct("!QI")  # total bytes, chunk size
ACK = struct.Struct("!Q")  # bytes taken in so far


def upload_budget_s(nbytes, rate_bps, *, efficiency=0.9):
    """Seconds an upload of `nbytes` may take on a link of `rate_bps`, allowing for TCP/IP overhead."""
    if nbytes < 0 or rate_bps <= 0 or not 0 < efficiency <= 1:
        raise ValueError(f"need nbytes >= 0, rate_bps > 0, 0 < efficiency <= 1; got {nbytes}, {rate_bps}, {efficiency}")
    return nbytes * 8 / (rate_bps * efficiency)


def _buffers(sock, *, sndbuf=None, rcvbuf=None):
    if sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)


def _recv_exactly(sock, n):
    data = bytearray()
    while len(data) < n:
        more = sock.recv(n - len(data))
        if not more:
            raise ConnectionError(f"peer closed after {len(data)} of {n} bytes")
        data += more
    return bytes(data)


def serve(address, port, *, rcvbuf=None, once=False):
    """Take uploads on (address, port), acknowledging each chunk; forever, or one upload with once=True."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        _buffers(listener, rcvbuf=rcvbuf)  # before listen: accepted sockets inherit it, and the window scale
        listener.bind((address, port))
        listener.listen()
        print(f"chunkup: listening on {address} {port}", flush=True)
        while True:
            conn, _ = listener.accept()
            with conn:
                total, chunk = HEADER.unpack(_recv_exactly(conn, HEADER.size))
                got = 0
                while got < total:
                    got += len(_recv_exactly(conn, min(chunk, total - got)))
                    conn.sendall(ACK.pack(got))
            if once:
                return


def upload(address, port, nbytes, *, chunk=65536, window=4, sndbuf=None, connect_timeout=10.0):
    """Upload `nbytes` to a chunkup server; return the seconds from connect to the last acknowledgement."""
    if nbytes < 1 or chunk < 1 or window < 1:
        raise ValueError(f"need nbytes, chunk and window >= 1; got {nbytes}, {chunk}, {window}")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    deadline = time.monotonic() + connect_timeout
    while True:  # the server may still be starting
        sock = socket.socket(family)
        _buffers(sock, sndbuf=sndbuf)
        try:
            sock.connect((address, port))
            break
        except ConnectionRefusedError:
            sock.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
    with sock:
        start = time.monotonic()
        sock.sendall(HEADER.pack(nbytes, chunk))
        block = b"u" * chunk
        sent = acked = 0
        while acked < nbytes:
            while sent < nbytes and sent - acked < window * chunk:
                size = min(chunk, nbytes - sent)
                sock.sendall(block[:size])
                sent += size
            acked = ACK.unpack(_recv_exactly(sock, ACK.size))[0]
        return time.monotonic() - start
