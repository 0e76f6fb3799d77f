"""The windows the kernel really uses: receive window from a buffer (C7, C8, C13) and the send-side limit (C11).

Pure arithmetic on what a test knows before it runs: the kernel release, the sysctls and the
setsockopt requests. The rules and constants follow net/ipv4/tcp_input.c, tcp_output.c and
include/net/tcp.h of the kernels named below; docs/model.md has the measurements behind them.
"""

from .kernel import KernelVersion
from .tcp import effective_socket_buffer
from .units import parse_size

__all__ = [
    "LEARNED_SCALING_RATIO",
    "INITIAL_SCALING_RATIO_6_6",
    "DEFAULT_ADV_WIN_SCALE",
    "receive_space",
    "advertised_window",
    "send_window",
    "sysctl_triple",
]

#: scaling_ratio (6.6+) once data has arrived: skb->len / skb->truesize of received segments,
#: in 1/256 units. The value is what a 1500-MTU veth's full segments give, as measured on 6.18
#: (docs/model.md, "The receive window a buffer buys").
LEARNED_SCALING_RATIO = 0.61

#: scaling_ratio's first guess before 6.10 (TCP_DEFAULT_SCALING_RATIO, ~1200 payload bytes per page of
#: truesize): where 6.6-6.9 kept it for a socket whose SO_RCVBUF was set. Not measured here (no such kernel at
#: hand): the 2024 report of windows halved against the old rule's 50%.
INITIAL_SCALING_RATIO_6_6 = 0.25

#: The unit the window is rounded down to: the receiver's MSS estimate on a 1500-MTU veth with
#: timestamps, before and after the scaling_ratio rule, as measured (docs/model.md, "The receive
#: window a buffer buys").
WINDOW_SEGMENT_OLD = 1460
WINDOW_SEGMENT_NEW = 1448

#: tcp_adv_win_scale's default since Linux 3.x (half the buffer is kept for overhead).
DEFAULT_ADV_WIN_SCALE = 1


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
    len/truesize: LEARNED_SCALING_RATIO on a 1500-MTU veth. Rounded down to whole segments.
    docs/model.md has the measured windows against this rule.
    """
    version = kernel if isinstance(kernel, KernelVersion) else KernelVersion.parse(str(kernel))
    space = receive_space(so_rcvbuf, sysctls=sysctls)
    if version.uses_scaling_ratio:
        learned = (
            INITIAL_SCALING_RATIO_6_6
            if version.clamps_set_buffers_at_the_initial_ratio and so_rcvbuf
            else LEARNED_SCALING_RATIO
        )
        ratio = learned if scaling_ratio is None else scaling_ratio
        if not 0 < ratio <= 1:
            raise ValueError(f"scaling_ratio: must be in (0, 1], got {ratio!r}")
        window = int(space * ratio)
    else:
        scale = int((sysctls or {}).get("net.ipv4.tcp_adv_win_scale", DEFAULT_ADV_WIN_SCALE))
        window = space - (space >> scale) if scale > 0 else space >> -scale
    # The receiver offers whole segments of its MSS estimate, and at least one (docs/model.md).
    segment = WINDOW_SEGMENT_NEW if version.uses_scaling_ratio else WINDOW_SEGMENT_OLD
    return max(segment, window // segment * segment)


def send_window(so_sndbuf=None, *, kernel, sysctls=None, chunk_bytes=None):
    """Bytes the sender can keep unacknowledged under its send buffer, at most (C11).

    The kernel charges queued skbs (sent-but-unacked and unsent) to sk_wmem_queued and lets
    tcp_sendmsg start a new skb only while sk_wmem_queued < sk_sndbuf; the check runs at
    skb boundaries, not per byte, so one write() can overshoot the buffer by up to the whole
    write. Writes no larger than the buffer keep about the buffer in flight (C11's law); larger
    ones add up to the whole write on a delayed path, on every kernel measured, while on an
    undelayed one the path's own window runs out first (docs/model.md, "The send-side limit").
    A locked SO_SNDBUF is never expanded (tcp_sndbuf_expand skips SOCK_SNDBUF_LOCK). Without
    SO_SNDBUF: tcp_wmem[2].
    """
    if so_sndbuf is None:
        wmem = sysctl_triple(sysctls, "net.ipv4.tcp_wmem") or (4096, 16384, 4194304)
        return wmem[2]
    if not isinstance(kernel, KernelVersion):
        KernelVersion.parse(str(kernel))  # the rule is the same on every kernel measured; a bad release still errs
    request = int(parse_size(so_sndbuf, "so_sndbuf"))
    buffer = effective_socket_buffer(request, _cap(sysctls, "net.core.wmem_max", 212992), kind="snd")
    if chunk_bytes is None or chunk_bytes <= buffer:
        return buffer
    return buffer + chunk_bytes
