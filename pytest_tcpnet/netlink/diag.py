"""sock_diag: TCP_INFO and socket memory of every TCP socket in a namespace, read from outside, as `ss -tim` does."""

import socket

from pyroute2.netlink.diag import SS_ALL, DiagSocket, MarshalDiag, inet_diag_msg

from ..errors import LabError
from ..model.tcpinfo import decode_tcp_info
from .namespaces import run_in_namespace

__all__ = ["SocketTable", "SKMEM_FIELDS", "watch_sockets", "tcp_counters"]

# Request bits are 1 << (attribute - 1): INET_DIAG_INFO = 2, INET_DIAG_CONG = 4, INET_DIAG_SKMEMINFO = 7.
_EXTENSIONS = (1 << 1) | (1 << 3) | (1 << 6)

#: The kernel's SK_MEMINFO_* order: what `ss -m` prints as r, rb, t, tb, f, w, o, bl, d.
SKMEM_FIELDS = ("rmem_alloc", "rcvbuf", "wmem_alloc", "sndbuf", "fwd_alloc", "wmem_queued", "optmem", "backlog",
                "drops")


class _RawInfoMessage(inet_diag_msg):
    # Keep tcp_info and skmeminfo as bytes: the project's decoder knows every field up to the newest
    # kernels (snd_wnd, rcv_wnd), and pyroute2's stops short and mis-splits the wscale bitfield.
    nla_map = tuple((name, "cdata") if name in ("INET_DIAG_INFO", "INET_DIAG_SKMEMINFO") else (name, kind)
                    for name, kind in inet_diag_msg.nla_map)


class _RawMarshal(MarshalDiag):
    msg_map = {socket.AF_INET: _RawInfoMessage, socket.AF_INET6: _RawInfoMessage}


class SocketTable:
    """A NETLINK_SOCK_DIAG socket of the calling thread's namespace.

    pyroute2 keeps a socket per thread: use a table only from the thread that created it
    (watch_sockets does that inside a namespace).
    """

    def __init__(self):
        self._diag = DiagSocket()
        self._diag.set_marshal(_RawMarshal())
        self._diag.bind()

    def tcp_sockets(self, states=SS_ALL):
        """[{local, remote, state, tcp_info, skmem, cc}] for every IPv4 TCP socket in the namespace."""
        rows = []
        for msg in self._diag.get_sock_stats(family=socket.AF_INET, states=states, extensions=_EXTENSIONS):
            raw_info = msg.get_attr("INET_DIAG_INFO")
            raw_mem = msg.get_attr("INET_DIAG_SKMEMINFO")
            rows.append({
                "local": (msg["idiag_src"], msg["idiag_sport"]),
                "remote": (msg["idiag_dst"], msg["idiag_dport"]),
                "state": msg["idiag_state"],
                "tcp_info": decode_tcp_info(raw_info) if raw_info else {},
                "skmem": dict(zip(SKMEM_FIELDS, memoryview(raw_mem).cast("I"))) if raw_mem else {},
                "cc": msg.get_attr("INET_DIAG_CONG"),
            })
        return rows

    def close(self):
        """Close the netlink socket."""
        self._diag.close()


def watch_sockets(namespace, on_sockets, *, ready=None):
    """Block, calling on_sockets(table) from a thread inside `namespace` until it returns False.

    ready(error_or_None) is called once the table is open (or could not be), so a caller
    can wait for the first sample before starting what it measures.
    """

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

    def read():
        counters = {}
        for table in ("netstat", "snmp"):
            # thread-self: /proc/self/net would show the process's namespace, not this thread's.
            with open(f"/proc/thread-self/net/{table}") as f:
                lines = f.read().splitlines()
            for names, values in zip(lines[::2], lines[1::2]):
                prefix, names = names.split(":", 1)
                counters.update({f"{prefix}.{n}": int(v) for n, v in zip(names.split(), values.split(":", 1)[1].split())
                                 if prefix in ("TcpExt", "Tcp")})
        return counters

    return run_in_namespace(namespace, read)
