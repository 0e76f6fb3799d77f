"""A user's own program, as a project testing itself would bring it: a stdlib TCP server and client.

    python userapp.py serve ADDRESS PORT [--rcvbuf N] [--sndbuf N]   answers each connection:
        "GET n" -> n bytes;  "PUT n" + n bytes -> "OK"
    python userapp.py get ADDRESS PORT NBYTES [--rcvbuf N]
    python userapp.py put ADDRESS PORT NBYTES [--sndbuf N]
Knows nothing of pytest-tcpnet.
"""

import argparse
import socket
import sys
import time

CHUNK = 1 << 16
HEADER = 32  # "GET n" / "PUT n", space-padded: the data never shares a read with it


def _header(verb, n):
    return f"{verb} {n}".ljust(HEADER).encode()


def _read_header(conn):
    data = b""
    while len(data) < HEADER:
        more = conn.recv(HEADER - len(data))
        if not more:
            break
        data += more
    return data.decode().split()


def _options(sock, args):
    if args.rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, args.rcvbuf)
    if args.sndbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, args.sndbuf)


def _read_exactly(conn, n):
    got = 0
    while got < n:
        data = conn.recv(min(CHUNK, n - got))
        if not data:
            break
        got += len(data)
    return got


def _family(address):
    return socket.AF_INET6 if ":" in address else socket.AF_INET


def serve(args):
    listener = socket.socket(_family(args.address))
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    _options(listener, args)
    listener.bind((args.address, args.port))
    listener.listen()
    print("listening", flush=True)
    while True:
        conn, _ = listener.accept()
        with conn:
            verb, n = _read_header(conn)
            if verb == "GET":
                block = b"x" * CHUNK
                left = int(n)
                while left:
                    left -= conn.send(block[: min(left, CHUNK)])
            else:
                conn.sendall(b"OK %d" % _read_exactly(conn, int(n)))


def client(args):
    for _ in range(500):  # the server may still be starting
        try:
            sock = socket.socket(_family(args.address))
            _options(sock, args)
            sock.connect((args.address, args.port))
            break
        except ConnectionRefusedError:
            sock.close()
            time.sleep(0.01)
    else:
        sys.exit(f"nothing listens on {args.address}:{args.port}")
    with sock:
        if args.command == "get":
            sock.sendall(_header("GET", args.nbytes))
            got = _read_exactly(sock, args.nbytes)
        else:
            sock.sendall(_header("PUT", args.nbytes))
            sock.sendall(b"y" * args.nbytes)
            got = int(sock.recv(64).split()[1])
    print(got, flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("command", choices=["serve", "get", "put"])
    parser.add_argument("address")
    parser.add_argument("port", type=int)
    parser.add_argument("nbytes", type=int, nargs="?")
    parser.add_argument("--rcvbuf", type=int)
    parser.add_argument("--sndbuf", type=int)
    args = parser.parse_args()
    serve(args) if args.command == "serve" else client(args)


if __name__ == "__main__":
    main()
