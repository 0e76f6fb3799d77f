"""sock_diag: TCP_INFO and socket memory of every TCP socket in a namespace, read from outside, as `ss -tim` does."""

import errno
import os
import socket
import threading
import time

from pyroute2.netlink import (
    NETLINK_SOCK_DIAG,
    NLM_F_MATCH,
    NLM_F_REQUEST,
    NLM_F_ROOT,
    NLMSG_DONE,
    NLMSG_ERROR,
    nlmsgerr,
)
from pyroute2.netlink.diag import SOCK_DIAG_BY_FAMILY, SS_ALL, MarshalDiag, inet_diag_msg, inet_diag_req

from ..errors import LabError
from ..model.tcpinfo import decode_tcp_info
from ..records import SKMEM_FIELDS
from .namespaces import run_in_namespace
from .session import session_for

__all__ = [
    "SocketTable",
    "SKMEM_FIELDS",
    "DestroyedSockets",
    "watch_sockets",
    "destroyed_sockets",
    "tcp_counters",
    "listening_ports",
]

_TCP_LISTEN = 10  # include/net/tcp_states.h
# The sock_diag multicast groups a TCP socket's destruction is broadcast to (include/uapi/linux/sock_diag.h:
# SKNLGRP_INET_TCP_DESTROY = 1, SKNLGRP_INET6_TCP_DESTROY = 3), as bind()'s group mask.
_DESTROY_GROUPS = {socket.AF_INET: 1 << 0, socket.AF_INET6: 1 << 2}

# Request bits are 1 << (attribute - 1): INET_DIAG_INFO = 2, INET_DIAG_CONG = 4, INET_DIAG_SKMEMINFO = 7.
_EXTENSIONS = (1 << 1) | (1 << 3) | (1 << 6)


class _RawInfoMessage(inet_diag_msg):
    # Keep tcp_info and skmeminfo as bytes: the project's decoder knows every field up to the newest
    # kernels (snd_wnd, rcv_wnd), and pyroute2's stops short and mis-splits the wscale bitfield.
    nla_map = tuple(
        (name, "cdata") if name in ("INET_DIAG_INFO", "INET_DIAG_SKMEMINFO") else (name, kind)
        for name, kind in inet_diag_msg.nla_map
    )


class _RawMarshal(MarshalDiag):
    msg_map = {socket.AF_INET: _RawInfoMessage, socket.AF_INET6: _RawInfoMessage}


class SocketTable:
    """A NETLINK_SOCK_DIAG socket of the namespace the creating thread is in; usable from any thread after.

    A plain socket carrying pyroute2's request and message classes: pyroute2's own DiagSocket is
    tied to the thread that opened it and is slow to open (an asyncio loop; benchmarks/NOTES.md).
    """

    def __init__(self):
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
        self._sock.bind((0, 0))
        self._marshal = _RawMarshal()
        self._lock = threading.Lock()
        self._seq = 0

    def _dump(self, family, states, extensions, protocol=socket.IPPROTO_TCP):
        """The inet_diag_msg of every socket of `family` and `states`, as DiagSocket.get_sock_stats asks for them."""
        with self._lock:
            self._seq = self._seq % 0x7FFFFFFF + 1
            req = inet_diag_req()
            req["sdiag_family"] = family
            req["sdiag_protocol"] = protocol
            req["idiag_states"] = states
            req["idiag_ext"] = extensions
            req["header"] = {
                "type": SOCK_DIAG_BY_FAMILY,
                "flags": NLM_F_REQUEST | NLM_F_ROOT | NLM_F_MATCH,
                "sequence_number": self._seq,
                "pid": 0,
            }
            req.encode()
            self._sock.send(req.data)
            found = []
            while True:
                for msg in self._marshal.parse(self._sock.recv(65536)):  # a dump's read is at most 32 KiB
                    header = msg["header"]
                    if header["sequence_number"] != self._seq:
                        continue
                    if header["type"] == NLMSG_DONE:
                        return found
                    if header["type"] == NLMSG_ERROR:
                        error = nlmsgerr(msg.data, offset=msg.offset)
                        error.decode()
                        code = abs(error["error"])
                        raise LabError(f"sock_diag dump failed: {os.strerror(code)}")
                    found.append(msg)

    def tcp_sockets(self, states=SS_ALL, families=(socket.AF_INET,)):
        """[{local, remote, state, tcp_info, skmem, cc}] for every TCP socket of the address families in the namespace."""
        return [_row(msg) for family in families for msg in self._dump(family, states, _EXTENSIONS)]

    def listening_ports(self, *, udp=False, families=(socket.AF_INET, socket.AF_INET6)):
        """Local ports with a listening TCP socket (udp=True: a bound UDP socket) in the namespace."""
        protocol, states = (socket.IPPROTO_UDP, SS_ALL) if udp else (socket.IPPROTO_TCP, 1 << _TCP_LISTEN)
        return {msg["idiag_sport"] for family in families for msg in self._dump(family, states, 0, protocol)}

    def close(self):
        """Close the netlink socket."""
        self._sock.close()


def _row(msg):
    """One inet_diag_msg as a socket row: {local, remote, state, tcp_info, skmem, cc}."""
    raw_info = msg.get_attr("INET_DIAG_INFO")
    raw_mem = msg.get_attr("INET_DIAG_SKMEMINFO")
    return {
        "local": (msg["idiag_src"], msg["idiag_sport"]),
        "remote": (msg["idiag_dst"], msg["idiag_dport"]),
        "state": msg["idiag_state"],
        "tcp_info": decode_tcp_info(raw_info) if raw_info else {},
        "skmem": dict(zip(SKMEM_FIELDS, memoryview(raw_mem).cast("I"))) if raw_mem else {},
        "cc": msg.get_attr("INET_DIAG_CONG"),
    }


class DestroyedSockets:
    """A NETLINK_SOCK_DIAG socket of a namespace subscribed to its TCP sockets' destruction: the kernel broadcasts
    each socket's last TCP_INFO when it frees it, so a connection too short for any sample is still seen, with its
    final counters. Open it inside the namespace (destroyed_sockets()); read() from any thread."""

    def __init__(self, families=(socket.AF_INET,)):
        groups = 0
        for family in families:
            groups |= _DESTROY_GROUPS[family]
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
        try:
            # Subscribing needs CAP_NET_ADMIN over the namespace (root, or the user namespace that owns it).
            self._sock.bind((0, groups))
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)  # a burst of short connections
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise
        self._marshal = _RawMarshal()
        self.overflowed = False  # the kernel dropped events: the receive buffer was full (ENOBUFS)

    def fileno(self):
        return self._sock.fileno()

    def read(self):
        """(monotonic time it was read, row) of every socket destroyed since the last read (rows as
        SocketTable.tcp_sockets gives them). Each is timed as its message is read, not when the reading began:
        decoding a burst takes milliseconds, while more sockets close."""
        rows = []
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except BlockingIOError:
                return rows
            except OSError as exc:
                if exc.errno == errno.ENOBUFS:
                    self.overflowed = True
                    continue
                raise
            read_at = time.monotonic()
            rows.extend(
                (read_at, _row(msg))
                for msg in self._marshal.parse(data)
                if msg["header"]["type"] == SOCK_DIAG_BY_FAMILY
            )

    def close(self):
        self._sock.close()


def destroyed_sockets(namespace, families=(socket.AF_INET,)):
    """A DestroyedSockets subscription opened inside namespace (LabError if this process may not subscribe)."""
    try:
        return run_in_namespace(namespace, DestroyedSockets, families)
    except OSError as exc:
        raise LabError(f"cannot subscribe to TCP socket destruction in namespace {namespace}: {exc}") from exc


def listening_ports(namespace, *, udp=False):
    """The ports something listens on in namespace (TCP LISTEN, or bound UDP sockets with udp=True), IPv4 and IPv6."""
    session = session_for(namespace)
    if session is not None:
        return session.resource("sock_diag socket", SocketTable).listening_ports(udp=udp)

    def read():
        table = SocketTable()
        try:
            return table.listening_ports(udp=udp)
        finally:
            table.close()

    return run_in_namespace(namespace, read)


def watch_sockets(namespace, on_sockets, *, ready=None):
    """Block, calling on_sockets(table) with a table of `namespace` until it returns False.

    With a session, the calling thread uses the session's table; else a thread entering the namespace opens one.

    ready(error_or_None) is called once the table is open (or could not be), so a caller
    can wait for the first sample before starting what it measures.
    """
    session = session_for(namespace)
    if session is not None:
        # The session's table, opened once inside the namespace, serves this thread as it is.
        try:
            table = session.resource("sock_diag socket", SocketTable)
        except LabError as exc:
            if ready:
                ready(exc)
            raise
        if ready:
            ready(None)
        while on_sockets(table):
            pass
        return

    def loop():
        try:
            table = SocketTable()
        except OSError as exc:
            error = LabError(f"cannot open a sock_diag socket in namespace {namespace}: {exc}")
            if ready:
                ready(error)
            raise error from exc
        try:
            if ready:
                ready(None)
            while on_sockets(table):
                pass
        finally:
            table.close()

    run_in_namespace(namespace, loop, own_thread=True)


def tcp_counters(namespace):
    """The namespace's TCP MIB counters ({'TcpExt.TCPToZeroWindowAdv': n, 'Tcp.RetransSegs': n, ...}), as `nstat` reads them."""
    session = session_for(namespace)
    if session is not None and session.thread_id:
        # The session's thread lives in the namespace: its /proc/PID/task/TID/net is the namespace's, read from here.
        return _read_mib(f"/proc/{os.getpid()}/task/{session.thread_id}/net")
    # thread-self: /proc/self/net would show the process's namespace, not this thread's.
    return run_in_namespace(namespace, _read_mib, "/proc/thread-self/net")


def _read_mib(directory):
    counters = {}
    for table in ("netstat", "snmp"):
        with open(f"{directory}/{table}") as f:
            lines = f.read().splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            prefix, names = names.split(":", 1)
            counters.update(
                {
                    f"{prefix}.{n}": int(v)
                    for n, v in zip(names.split(), values.split(":", 1)[1].split())
                    if prefix in ("TcpExt", "Tcp")
                }
            )
    return counters
