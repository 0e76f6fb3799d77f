"""Several rtnetlink requests in one send on a namespace's own socket, compiled by pyroute2's request code.

pyroute2 0.9's IPRoute is slow to open (an asyncio loop per thread) and costs Python time per
request, and a path needs ~20 requests in three namespaces (benchmarks/NOTES.md, "Costs the
netlink layer is built around"). Here each request is
compiled exactly as IPRoute.link/addr/route/tc compile it (pyroute2's argument processors and
NetlinkRequest fill a pyroute2 message class), all of a namespace's requests go out in one
sendmsg, and the kernel's acks are read back together. The kernel handles the messages of one
send in order, so a request may rely on the ones before it (an address on a link created just
before). A plain socket is not tied to a thread, unlike pyroute2's, so any thread may use it.
"""

import os
import socket
import struct
import threading

from pyroute2.iproute.linux import get_arguments_processor
from pyroute2.netlink import NLMSG_DONE, NLMSG_ERROR
from pyroute2.netlink.exceptions import NetlinkError
from pyroute2.netlink.nlsocket import NetlinkRequest
from pyroute2.netlink.rtnl import (
    RTM_GETLINK,
    RTM_GETQDISC,
    RTM_GETSTATS,
    RTM_GETTCLASS,
    RTM_NEWADDR,
    RTM_NEWLINK,
    RTM_NEWNEIGH,
    RTM_NEWQDISC,
    RTM_NEWROUTE,
    RTM_NEWTCLASS,
    RTM_NEWTFILTER,
)
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.ifstatsmsg import ifstatsmsg
from pyroute2.netlink.rtnl.marshal import MarshalRtnl
from pyroute2.netlink.rtnl.ndmsg import ndmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg
from pyroute2.netlink.rtnl.tcmsg import tcmsg

__all__ = ["RtnlSocket", "compile_request", "precompile", "nlattr", "raw_qdisc_request", "veth_peer_linkinfo"]

# (mode, command) -> (message class, message type, pyroute2's flag set), as in IPRoute's command maps.
_REQUESTS = {
    ("link", "add"): (ifinfmsg, RTM_NEWLINK, "create"),
    ("link", "set"): (ifinfmsg, RTM_NEWLINK, "req"),
    ("addr", "add"): (ifaddrmsg, RTM_NEWADDR, "create"),
    ("route", "add"): (rtmsg, RTM_NEWROUTE, "create"),
    ("neigh", "add"): (ndmsg, RTM_NEWNEIGH, "create"),
    ("tc", "add"): (tcmsg, RTM_NEWQDISC, "create"),
    ("tc", "add-raw"): (None, RTM_NEWQDISC, "create"),  # raw_qdisc_request
    ("tc", "add-class"): (tcmsg, RTM_NEWTCLASS, "create"),
    ("tc", "add-filter"): (tcmsg, RTM_NEWTFILTER, "create"),
    # In place, as `tc qdisc change` / `tc class change`: the running qdisc keeps its queue (docs/design.md, pitfall 11).
    ("tc", "change"): (tcmsg, RTM_NEWQDISC, "change"),
    ("tc", "change-class"): (tcmsg, RTM_NEWTCLASS, "change"),
    ("tc", "dump-class"): (tcmsg, RTM_GETTCLASS, "dump"),
    ("link", "get"): (ifinfmsg, RTM_GETLINK, "get"),
    ("tc", "dump"): (tcmsg, RTM_GETQDISC, "dump"),
    ("stats", "get"): (ifstatsmsg, RTM_GETSTATS, "get"),
}


class _Compiler:
    """What NetlinkRequest reads from a socket while filling a message; nothing is ever sent through it."""

    addr_pool = None
    status = {"nlm_echo": False}
    epid = 0
    marshal = None


# Compiled requests by their arguments: a path's requests are the same from one path to the next
# (same names, addresses, indexes; the same qdiscs for the same link), and compiling one costs
# Python time (htb's rate tables most; benchmarks/NOTES.md). Only the sequence number differs.
_compiled: dict = {}
_COMPILED_MAX = 512
_SEQ = struct.Struct("=I")
_SEQ_OFFSET = 8  # nlmsghdr: length u32, type u16, flags u16, seq u32, pid u32
_RECV_SIZE = 65536  # the kernel fills a dump's messages into at most 32 KiB per read


def _compiled_request(mode, command, seq, kwargs):
    """compile_request(...), from the cache when the same request was compiled before (its sequence number set)."""
    key = (mode, command, repr(kwargs))
    data = _compiled.get(key)
    if data is None:
        data = compile_request(mode, command, 0, **dict(kwargs))
        if len(_compiled) >= _COMPILED_MAX:
            _compiled.clear()
        _compiled[key] = data
    data = bytearray(data)
    _SEQ.pack_into(data, _SEQ_OFFSET, seq)
    return data


def precompile(requests):
    """Compile [(mode, command, kwargs)] into the cache now, so sending them later costs no Python encoding (a
    scheduled link change must go out on time, and compiling an htb class change takes longer than a step may be
    late, far longer in an emulated VM: benchmarks/NOTES.md)."""
    for mode, command, kwargs in requests[: _COMPILED_MAX // 2]:
        _compiled_request(mode, command, 0, kwargs)


def compile_batch(requests, first_seq):
    """[(mode, command, kwargs)] as one message with sequence numbers from first_seq: (bytes, [seq, ...])."""
    data, seqs = bytearray(), []
    for seq, (mode, command, kwargs) in enumerate(requests, first_seq):
        data += _compiled_request(mode, command, seq, kwargs)
        seqs.append(seq)
    return bytes(data), seqs


def compile_request(mode, command, seq, **kwargs):
    """The encoded bytes of one request, as IPRoute.<mode>(command, **kwargs) would send it (tc takes kind=...).

    options_extra (tc only): [(attribute type, payload bytes)] appended inside TCA_OPTIONS, for
    attributes pyroute2 cannot encode (netem's delay distribution table).
    """
    if (mode, command) == ("tc", "add-raw"):
        return raw_qdisc_request(seq, **kwargs)
    extra = kwargs.pop("options_extra", None)
    data = _compile(mode, command, seq, kwargs)
    return _append_to_options(data, extra) if extra else data


def _compile(mode, command, seq, kwargs):
    try:
        msg_class, msg_type, flags = _REQUESTS[(mode, command)]
    except KeyError:
        raise ValueError(f"no batched form of {mode} {command!r}") from None
    parameters = None
    if mode == "route":
        # IPRoute.route's own defaults for a new route.
        kwargs.setdefault("proto", "static")
        kwargs.setdefault("type", "unicast")
        parameters = {"strict_check": False}
    arguments = get_arguments_processor(mode, command, kwargs, parameters)
    request = NetlinkRequest(
        _Compiler, msg_class(), command, {command: (msg_type, flags)}, None, arguments, msg_seq=seq
    )
    request.msg.encode()
    return request.msg.data


_NLA = struct.Struct("=HH")
_TCMSG_END = 16 + 20  # nlmsghdr, then struct tcmsg
_TCA_OPTIONS = 2


def _nla_align(n):
    return (n + 3) & ~3


def nlattr(kind, payload):
    """One netlink attribute: header, payload, padding to 4 bytes."""
    return _NLA.pack(_NLA.size + len(payload), kind) + payload + bytes(_nla_align(len(payload)) - len(payload))


def _append_to_options(data, extra):
    """A tc message with more attributes nested at the end of its TCA_OPTIONS (lengths fixed up)."""
    added = b"".join(nlattr(kind, payload) for kind, payload in extra)
    offset = _TCMSG_END
    while offset < len(data):
        length, kind = _NLA.unpack_from(data, offset)
        if kind & 0x3FFF == _TCA_OPTIONS:
            end = offset + _nla_align(length)
            if _NLA.size + length + len(added) > 0xFFFF:
                raise ValueError(f"TCA_OPTIONS would exceed 64 KiB with {len(added)} more bytes")
            data = bytearray(data[:end] + added + data[end:])
            _NLA.pack_into(data, offset, _nla_align(length) + len(added), kind)
            struct.pack_into("=I", data, 0, len(data))
            return bytes(data)
        offset += _nla_align(length)
    raise ValueError("the tc message has no TCA_OPTIONS to extend")


_NLMSGHDR = struct.Struct("=IHHII")
_TCMSG = struct.Struct("=BBHiIII")  # struct tcmsg: family, pad, pad, ifindex, handle, parent, info
_NLM_F_CREATE_EXCL_ACK_REQUEST = 0x400 | 0x200 | 0x4 | 0x1
_TCA_KIND = 1
_NLA_F_NESTED = 0x8000


def raw_qdisc_request(seq, *, index, handle, parent, kind, options, nested_flag=False):
    """An RTM_NEWQDISC (create, exclusive) of `kind` with TCA_OPTIONS = options bytes (nested attributes, or a
    plain struct: the kernel tells them by kind; nested_flag sets NLA_F_NESTED on it, which qdiscs that parse
    their options strictly require), for qdiscs pyroute2 cannot encode; as `tc qdisc add` sends it."""
    body = _TCMSG.pack(0, 0, 0, index, handle, parent, 0) + nlattr(_TCA_KIND, kind.encode() + b"\0")
    body += nlattr(_TCA_OPTIONS | (_NLA_F_NESTED if nested_flag else 0), options)
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), RTM_NEWQDISC, _NLM_F_CREATE_EXCL_ACK_REQUEST, seq, 0) + body


def veth_peer_linkinfo(peer_ifname, peer_netns_fd, peer_index, peer_mac=None):
    """IFLA_LINKINFO of a veth whose peer is created in another namespace with a chosen ifindex.

    IPRoute's `peer=` shortcut turns every key into an attribute and cannot set the peer's
    ifinfomsg header, where the kernel reads the index (the peer cannot be created up: the
    kernel opens it before its other end exists, ENOTCONN).
    """
    attrs = [("IFLA_IFNAME", peer_ifname), ("IFLA_NET_NS_FD", peer_netns_fd)]
    if peer_mac:
        attrs.append(("IFLA_ADDRESS", peer_mac))
    peer = {"attrs": attrs, "index": peer_index}
    return (
        "IFLA_LINKINFO",
        {"attrs": [("IFLA_INFO_KIND", "veth"), ("IFLA_INFO_DATA", {"attrs": [("VETH_INFO_PEER", peer)]})]},
    )


class RtnlSocket:
    """A NETLINK_ROUTE socket of the namespace the creating thread is in; usable from any thread."""

    def __init__(self):
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
        self._sock.bind((0, 0))
        self._marshal = MarshalRtnl()
        self._lock = threading.Lock()
        self._seq = 0

    def batch(self, requests):
        """Send [(mode, command, kwargs), ...] in one message and wait for every ack.

        Raises NetlinkError for the first request the kernel refused (naming it), after
        reading every answer, so the socket is left clean for the next batch.
        """
        self.query(requests)

    def query(self, requests):
        """Like batch, and return each request's answers: [[message, ...] per request] (at most one dump per call).

        A "get" is answered by its message(s) and an ack, a "dump" by messages up to NLMSG_DONE.
        """
        with self._lock:
            data = bytearray()
            pending, answers = {}, []
            for mode, command, kwargs in requests:
                self._seq = self._seq % 0x7FFFFFFF + 1
                data += _compiled_request(mode, command, self._seq, kwargs)
                answers.append([])
                pending[self._seq] = (mode, command, kwargs, answers[-1])
            self._sock.send(data)
            failure = None
            while pending:
                for msg in self._marshal.parse(self._sock.recv(_RECV_SIZE)):
                    seq, kind = msg["header"]["sequence_number"], msg["header"]["type"]
                    request = pending.get(seq)
                    if request is None:
                        continue
                    if kind == NLMSG_ERROR:
                        del pending[seq]
                        code = -msg["error"]  # the kernel acks with -errno, 0 for success
                        if code and failure is None:
                            mode, command, kwargs, _ = request
                            failure = NetlinkError(code, f"{mode} {command} {_describe(kwargs)}: {os.strerror(code)}")
                    elif kind == NLMSG_DONE:
                        del pending[seq]
                    else:
                        request[3].append(msg)
            if failure is not None:
                raise failure
            return answers

    def close(self):
        """Close the socket."""
        self._sock.close()


def _describe(kwargs):
    return " ".join(f"{k}={v}" for k, v in kwargs.items() if k != "attrs") or "-"
