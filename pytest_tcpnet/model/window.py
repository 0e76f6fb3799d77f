"""The windows the kernel really uses: receive window from a buffer (C7, C8, C13) and the send-side limit (C11).

Pure arithmetic on what a test knows before it runs: the kernel release, the sysctls and the
setsockopt requests. The rules and constants follow net/ipv4/tcp_input.c, tcp_output.c and
include/net/tcp.h of the kernels named below; docs/model.md has the measurements behind them.
"""

from .kernel import KernelVersion
from .tcp import effective_socket_buffer
from .units import parse_size

__all__ = ["LEARNED_SCALING_RATIO", "DEFAULT_ADV_WIN_SCALE", "HOST_SIZE_GOAL", "receive_space",
           "advertised_window", "send_window", "sysctl_triple"]

#: scaling_ratio (6.6+) once data has arrived: skb->len / skb->truesize of received segments,
#: in 1/256 units. A 1448-byte segment on a 1500-MTU veth lands in a ~2.3 KB skb: measured on
#: 6.18 as window / rcvbuf = 0.594 .. 0.630 for SO_RCVBUF 32 KB .. 256 KB, so 0.61.
LEARNED_SCALING_RATIO = 0.61

#: tcp_adv_win_scale's default since Linux 3.x (half the buffer is kept for overhead).
DEFAULT_ADV_WIN_SCALE = 1

#: The largest skb tcp_sendmsg fills (size_goal: GSO max size minus headers, ~64 KB) before it
#: checks the send buffer again; one such skb can overshoot SO_SNDBUF (see send_window).
HOST_SIZE_GOAL = 65536 - 1448


def sysctl_triple(sysctls, name):
    """(min, default, max) of tcp_rmem/tcp_wmem from a {name: "a b c"} dict, or None when absent."""
    value = (sysctls or {}).get(name)
    if value is None:
        return None
    parts = str(value).split()
    if len(parts) != 3:
        raise ValueError(f"sysctls[{name!r}]: expected three numbers 'min default max', got {value!r}")
    return tuple(int(p) for p in parts)


def _cap(sysctls, name, default):
    value = (sysctls or {}).get(name)
    return default if value is None else int(value)


def receive_space(so_rcvbuf=None, *, sysctls=None):
    """The receive buffer (bytes of memory, not payload) the socket ends up with.

    so_rcvbuf is the setsockopt request (doubled, capped by net.core.rmem_max, floored); None
    means the kernel sizes it from tcp_rmem: the default (middle) value when autotuning is
    off (tcp_moderate_rcvbuf = 0), the maximum it may grow to when it is on.
    """
    if so_rcvbuf is not None:
        request = int(parse_size(so_rcvbuf, "so_rcvbuf"))
        return effective_socket_buffer(request, _cap(sysctls, "net.core.rmem_max", 212992), kind="rcv")
    rmem = sysctl_triple(sysctls, "net.ipv4.tcp_rmem") or (4096, 131072, 6291456)
    autotuning = str((sysctls or {}).get("net.ipv4.tcp_moderate_rcvbuf", "1")).strip() != "0"
    return rmem[2] if autotuning else rmem[1]


def advertised_window(so_rcvbuf=None, *, kernel, sysctls=None, scaling_ratio=None):
    """The largest receive window (payload bytes) a fast-reading receiver advertises for a buffer (C7, C8).

    kernel: a release string or KernelVersion. Before 6.6 the kernel keeps
    space / 2^tcp_adv_win_scale for overhead (scale 1: half the buffer); from 6.6 on it
    multiplies the space by scaling_ratio, which starts at a guess (1200 B per 4 KB page,
    ~0.25, before 6.10; 0.5 after) and is then learned from the received skbs'
    len/truesize: LEARNED_SCALING_RATIO on a 1500-MTU veth. Accurate to a few percent from
    32 KB of buffer up; below that the window is a few whole segments (docs/model.md).
    """
    version = kernel if isinstance(kernel, KernelVersion) else KernelVersion.parse(str(kernel))
    space = receive_space(so_rcvbuf, sysctls=sysctls)
    if version.uses_scaling_ratio:
        ratio = LEARNED_SCALING_RATIO if scaling_ratio is None else scaling_ratio
        if not 0 < ratio <= 1:
            raise ValueError(f"scaling_ratio: must be in (0, 1], got {ratio!r}")
        return int(space * ratio)
    scale = int((sysctls or {}).get("net.ipv4.tcp_adv_win_scale", DEFAULT_ADV_WIN_SCALE))
    if scale > 0:
        return space - (space >> scale)
    return space >> -scale


def send_window(so_sndbuf=None, *, kernel=None, sysctls=None, chunk_bytes=None):
    """Bytes the sender can keep unacknowledged (in flight) under its send buffer (C11).

    The kernel charges every queued skb's truesize, sent-but-unacked and not-yet-sent alike,
    to sk_wmem_queued and lets tcp_sendmsg add data while sk_wmem_queued < sk_sndbuf
    (sk_stream_memory_free). The check runs only when a new skb is started, and an skb is
    filled up to size_goal (~64 KB with GSO) from one large write: so a write of chunk_bytes
    can overshoot the buffer by min(chunk_bytes, size_goal). A locked SO_SNDBUF is never
    expanded (tcp_sndbuf_expand only runs without SOCK_SNDBUF_LOCK). Payload per byte of
    truesize is ~1 for paged skbs, so in flight <= effective buffer + overshoot.
    Without SO_SNDBUF, the buffer grows to tcp_wmem[2].
    """
    if so_sndbuf is None:
        wmem = sysctl_triple(sysctls, "net.ipv4.tcp_wmem") or (4096, 16384, 4194304)
        return wmem[2]
    request = int(parse_size(so_sndbuf, "so_sndbuf"))
    buffer = effective_socket_buffer(request, _cap(sysctls, "net.core.wmem_max", 212992), kind="snd")
    overshoot = HOST_SIZE_GOAL if chunk_bytes is None else min(chunk_bytes, HOST_SIZE_GOAL)
    return buffer + overshoot
