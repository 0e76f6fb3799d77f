"""The packets that open and close each TCP connection in a namespace (SYN, FIN, RST), stamped by the kernel.

A packet socket with a filter that keeps only those packets' headers costs a few reads per
connection, so every connection's opening and closing is exact (to the kernel's receive stamp)
whatever the sampling interval (docs/design.md, pitfall 14). Samples give the time series between.
"""

import ctypes
import socket
import struct
import time

from ..errors import LabError
from ..netlink.namespaces import run_in_namespace

__all__ = ["LifecyclePackets", "lifecycle_packets", "connection_key"]

_ETH_P_ALL = 0x0003
_ETH_P_IP, _ETH_P_IPV6 = 0x0800, 0x86DD
_SOL_PACKET = 263
_PACKET_STATISTICS = 6
_SO_ATTACH_FILTER = 26  # include/uapi/asm-generic/socket.h (x86 and um alike)
_SO_TIMESTAMPNS = 35  # SO_TIMESTAMPNS_OLD: a struct timespec of CLOCK_REALTIME per packet
_SKF_AD_PROTOCOL = -0x1000 & 0xFFFFFFFF  # SKF_AD_OFF + SKF_AD_PROTOCOL: the packet's ethertype
_SYN, _FIN, _RST, _ACK = 0x02, 0x01, 0x04, 0x10
_SO_RCVBUFFORCE = 33
_RCVBUF = 8 << 20
_KEEP = 96  # bytes kept per packet: an IPv6 header (40) and a TCP header with options (<= 60)


def _filter():
    """A classic BPF program keeping IPv4/IPv6 TCP packets with SYN, FIN or RST set (headers only).

    Cooked (SOCK_DGRAM) packet sockets hand the filter the network header at offset 0. IPv6 extension
    headers and IPv4 fragments are let go: the project's worlds send neither on TCP.
    """
    ld_abs_h, ld_abs_b, ldx_msh, ld_ind_b = 0x28, 0x30, 0xB1, 0x50
    jeq, jset, ret = 0x15, 0x45, 0x06
    program = [
        ("proto", ld_abs_h, 0, 0, _SKF_AD_PROTOCOL),
        (None, jeq, None, "v6", _ETH_P_IP),
        (None, ld_abs_b, 0, 0, 9),  # IPv4 protocol
        (None, jeq, None, "drop", socket.IPPROTO_TCP),
        (None, ld_abs_h, 0, 0, 6),  # flags and fragment offset
        (None, jset, "drop", None, 0x1FFF),
        (None, ldx_msh, 0, 0, 0),  # X = the IPv4 header's length
        (None, ld_ind_b, 0, 0, 13),  # TCP flags
        (None, jset, "keep", "drop", _SYN | _FIN | _RST),
        ("v6", jeq, None, "drop", _ETH_P_IPV6),
        (None, ld_abs_b, 0, 0, 6),  # IPv6 next header
        (None, jeq, None, "drop", socket.IPPROTO_TCP),
        (None, ld_abs_b, 0, 0, 40 + 13),
        (None, jset, "keep", "drop", _SYN | _FIN | _RST),
        ("drop", ret, 0, 0, 0),
        ("keep", ret, 0, 0, _KEEP),
    ]
    at = {label: i for i, (label, *_) in enumerate(program) if label}
    code = b""
    for i, (_, op, true, false, k) in enumerate(program):
        # A jump's targets count instructions after the next one; None: fall through.
        jt = 0 if true in (None, 0) else at[true] - i - 1
        jf = 0 if false in (None, 0) else at[false] - i - 1
        code += struct.pack("HBBI", op, jt, jf, k)
    return code, len(program)


def connection_key(a, b):
    """One key for a connection whichever end's view: its two (address, port) ends, in order."""
    return tuple(sorted((tuple(a), tuple(b))))


class LifecyclePackets:
    """A packet socket of the namespace the creating thread is in, keeping every TCP SYN, FIN and RST; read() from
    any thread. `opened[key]`: monotonic time of a connection's first SYN (no ACK); `closed[key]`: its last FIN or
    RST, each keyed by connection_key()."""

    def __init__(self):
        self._sock = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC, socket.htons(_ETH_P_ALL))
        try:
            code, count = _filter()
            self._program = ctypes.create_string_buffer(code)  # the kernel copies it; kept for clarity
            fprog = struct.pack("HL", count, ctypes.addressof(self._program))
            self._sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
            self._sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            try:
                # A burst of short connections, read by a sampler thread that may wait for the CPU (a one-CPU guest
                # dropped packets at rmem_max's cap): each kept packet still costs its whole buffer.
                self._sock.setsockopt(socket.SOL_SOCKET, _SO_RCVBUFFORCE, _RCVBUF)
            except PermissionError:  # CAP_NET_ADMIN over the host's user namespace: a rootless run has not
                self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise
        # Packets sent before the filter was attached may wait in the queue: drop them, they are not this run's.
        self._drain()
        self.opened = {}
        self.closed = {}

    def fileno(self):
        return self._sock.fileno()

    def _drain(self):
        while True:
            try:
                self._sock.recv(1)
            except BlockingIOError:
                return

    def read(self):
        """Take in every packet queued since the last read."""
        offset = None
        while True:
            try:
                data, ancillary, _, _ = self._sock.recvmsg(_KEEP, socket.CMSG_SPACE(16))
            except BlockingIOError:
                return
            stamp = next((d for level, kind, d in ancillary if kind == _SO_TIMESTAMPNS), None)
            if stamp is None:
                at = time.monotonic()
            else:
                seconds, nanoseconds = struct.unpack("qq", stamp[:16])
                # The stamp is CLOCK_REALTIME; the offset to the monotonic clock is read now, once per read.
                offset = _realtime_offset() if offset is None else offset
                at = seconds + nanoseconds / 1e9 - offset
            parsed = _parse(data)
            if parsed is None:
                continue
            key, flags = parsed
            if flags & _SYN and not flags & _ACK:
                self.opened.setdefault(key, at)
            if flags & (_FIN | _RST):
                self.closed[key] = max(at, self.closed.get(key, at))

    def dropped(self):
        """Packets the kernel dropped since the last call (the receive buffer was full)."""
        stats = self._sock.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8)
        return struct.unpack("II", stats)[1]

    def close(self):
        self._sock.close()


def _realtime_offset():
    """CLOCK_REALTIME less CLOCK_MONOTONIC now: of three readings, the one its two monotonic reads bracket most
    tightly. (A thread preempted between reading one clock and the other shifts a single reading;
    docs/your-application.md, "Connections from their close".)"""
    best = None
    for _ in range(3):
        before = time.monotonic()
        real = time.time()
        after = time.monotonic()
        if best is None or after - before < best[0]:
            best = (after - before, real - (before + after) / 2)
    return best[1]


def _parse(data):
    """(connection_key, TCP flags) of a kept packet, or None for a header too short to read."""
    version = data[0] >> 4 if data else 0
    if version == 4 and len(data) >= 20:
        header = (data[0] & 0xF) * 4
        family, src, dst = socket.AF_INET, data[12:16], data[16:20]
    elif version == 6 and len(data) >= 40:
        header = 40
        family, src, dst = socket.AF_INET6, data[8:24], data[24:40]
    else:
        return None
    if len(data) < header + 14:
        return None
    sport, dport = struct.unpack_from("!HH", data, header)
    flags = data[header + 13]
    key = connection_key((socket.inet_ntop(family, src), sport), (socket.inet_ntop(family, dst), dport))
    return key, flags


def lifecycle_packets(namespace):
    """A LifecyclePackets socket opened inside namespace (LabError if this process may not open packet sockets)."""
    try:
        return run_in_namespace(namespace, LifecyclePackets)
    except OSError as exc:
        raise LabError(f"cannot watch TCP connections open and close in namespace {namespace}: {exc}") from exc
