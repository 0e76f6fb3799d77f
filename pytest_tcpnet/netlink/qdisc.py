"""Shaping one direction on the router's egress: htb for rate, netem for delay and loss."""

import functools
import hashlib
import ipaddress
import struct

from pyroute2.netlink.exceptions import NetlinkError

from ..errors import LabError
from ..guest import backend, software_emulated
from ..model import MTU_FRAME_BYTES, shaper_burst_bytes
from ..model.specs import distribution_table
from .namespaces import with_iproute
from .queues import options_flagged_nested, queue_options, read_queue
from .rtnl import nlattr
from .session import session_for
from .topology import _index

__all__ = [
    "shape_egress",
    "change_egress",
    "prepare_change",
    "timed_change",
    "read_back_egress",
    "shape_egress_classes",
    "qdisc_stats",
    "qdisc_stats_of",
    "flow_queues_of",
    "htb_burst_bytes",
    "shaper_burst_s",
    "u32_keys",
    "netem_seed",
    "UNLIMITED_CLASS_BPS",
]

_ROOT = 0x10000  # 1:
_RATE_CLASS = 0x10001  # 1:1
_LEAF = 0x100000  # 10:


#: How late a timer may fire on this platform, so how long htb may go without sending: what it cannot send
#: then is lost unless its burst holds it (docs/design.md, pitfall 4). The host is often a VM itself, whose idle
#: vCPU wakes when its hypervisor runs it: on a quiet Firecracker VM 1 ms sleeps overslept by p99 4.3 ms, p99.9
#: 8.1 ms, and with a 1 ms burst a 20 Mbit/s link carried 0.89-0.998 of its rate (1 and 3 MB transfers, bbr and
#: cubic, 12 runs), with 4 ms 0.949-1.003, with 8 ms 0.999-1.013; earlier machines read 0.995-1.007 with 1 ms.
#: Beside another process building and tearing down labs (an xdist sibling's work: ~60 pairs a second) a 50 Mbit/s
#: link carried 0.92-0.95 of the model with 1 ms and 0.99-1.00 with 4 ms (4 transfers each; alone, 0.98-0.99 and
#: 0.99-1.00): the kernel's namespace work holds up the shaper's timer for milliseconds.
HOST_TIMER_LATENCY_S = 4e-3
#: In a software-emulated guest the vCPU wakes when the host schedules it, later still beside a busy host: this
#: is the least burst that kept htb's rate there, quiet and beside a CPU hog (docs/vm.md, "A busy host: the
#: emulator's priority").
EMULATED_TIMER_LATENCY_S = 8e-3
#: A User-Mode Linux guest is a host process: its timers fire when the host schedules it, and a busy host lets it
#: wait for milliseconds (a reno flow at 50 Mbit/s, 2 ms, beside two CPU-bound processes kept 0.936-0.983 of the
#: rate with a 1 ms burst, 0.987-1.001 with 4 ms; quiet, 0.989-0.998 either way: docs/vm.md).
UML_TIMER_LATENCY_S = 4e-3


def shaper_burst_s():
    """The platform's timer latency, which the lab's htb burst holds at its rate: 4 ms on the host and under UML, 8 ms
    under emulation."""
    if software_emulated():
        return EMULATED_TIMER_LATENCY_S
    if backend() == "uml":
        return UML_TIMER_LATENCY_S
    return HOST_TIMER_LATENCY_S


def htb_burst_bytes(rate_bps):
    """HTB burst: the rate over the platform's timer latency (shaper_burst_s), at least two frames."""
    return shaper_burst_bytes(rate_bps, shaper_burst_s())


#: The need (requirements.check_need) of a seeded netem: its generator takes TCA_NETEM_PRNG_SEED from Linux 6.6 on.
NETEM_SEED_NEED = "kernel>=6.6"


def netem_seed(seed, *labels):
    """The 64-bit seed of one netem qdisc: from a lab's seed and the labels that name the qdisc in its world (its
    interface, class, phase), so the same test's same qdisc draws the same losses on every run."""
    digest = hashlib.blake2b(repr((seed, *labels)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _netem_kwargs(way, *, seed=None, every_field=False):
    """pyroute2's netem arguments for a way; seed: its generator's (Linux >= 6.6; None: the kernel draws one);
    every_field: also the zero ones pyroute2 would leave out (a change)."""
    # pyroute2 takes delays in microseconds and probabilities in percent.
    kwargs = {"delay": round(way.delay_s * 1e6), "limit": way.netem_limit_packets()}
    if way.jitter_s:
        kwargs["jitter"] = round(way.jitter_s * 1e6)
    if way.loss:
        kwargs["loss"] = way.loss * 100
    if way.duplicate:
        kwargs["duplicate"] = way.duplicate * 100
    if way.reorder:
        kwargs["prob_reorder"] = way.reorder * 100
    if way.corrupt:
        kwargs["prob_corrupt"] = way.corrupt * 100
    # Correlations: pyroute2's names for tc's third number after a value (`delay 100ms 10ms 30%`).
    for field, name in (
        ("jitter_correlation", "delay_corr"),
        ("loss_correlation", "loss_corr"),
        ("duplicate_correlation", "dup_corr"),
        ("reorder_correlation", "corr_reorder"),
        ("corrupt_correlation", "corr_corrupt"),
    ):
        if getattr(way, field):
            kwargs[name] = getattr(way, field) * 100
    if way.gap:
        kwargs["gap"] = way.gap
    # pyroute2 has no encoding for these: they go inside TCA_OPTIONS as tc sends them.
    extra = []
    table = distribution_table(way.distribution)
    if table:
        extra.append((_TCA_NETEM_DELAY_DIST, _read_distribution(table)))
    if way.loss_model:
        kwargs.pop("loss", None)  # the model decides every loss; tc sends no random loss beside it
        ge = way.loss_model
        model = _GEMODEL.pack(*(_u32(v) for v in (ge.p, ge.r, 1 - ge.bad_loss, ge.good_loss)))
        extra.append((_TCA_NETEM_LOSS | _NLA_F_NESTED, nlattr(_NETEM_LOSS_GE, model)))
    if way.slot:
        slot = way.slot
        extra.append(
            (
                _TCA_NETEM_SLOT,
                _SLOT.pack(
                    round(slot.min_delay * 1e9), round(slot.max_delay * 1e9), slot.packets or 0, slot.bytes or 0, 0, 0
                ),
            )
        )
    if every_field:
        # netem's change keeps the correlations, reorder and corrupt it is not sent (sch_netem.c: netem_change
        # reads each only if present), and pyroute2 sends none of them at zero: a step from 1% corrupt to none
        # would leave 1%. Zeros go explicitly.
        if not any(kwargs.get(name) for name in ("delay_corr", "loss_corr", "dup_corr")):
            extra.append((_TCA_NETEM_CORR, bytes(12)))
        if not kwargs.get("prob_reorder"):
            extra.append((_TCA_NETEM_REORDER, bytes(8)))
        if not kwargs.get("prob_corrupt"):
            extra.append((_TCA_NETEM_CORRUPT, bytes(8)))
    if seed is not None:
        # netem reseeds its generator with it at every add and change (sch_netem.c: netem_change); a kernel before
        # 6.6 ignores the attribute (its policy ends before it), which the lab's read-back catches.
        extra.append((_TCA_NETEM_PRNG_SEED, _U64.pack(seed)))
    if extra:
        kwargs["options_extra"] = tuple(extra)
    return kwargs


def _u32(fraction):
    """A probability as netem takes it: a share of 2^32 - 1."""
    return min(2**32 - 1, round(fraction * (2**32 - 1)))


# include/uapi/linux/pkt_sched.h
_TCA_NETEM_CORR = 1
_TCA_NETEM_DELAY_DIST = 2
_TCA_NETEM_REORDER = 3
_TCA_NETEM_CORRUPT = 4
_TCA_NETEM_LOSS = 5
_TCA_NETEM_SLOT = 12
_TCA_NETEM_PRNG_SEED = 14
_U64 = struct.Struct("=Q")
_NETEM_LOSS_GE = 2
_NLA_F_NESTED = 0x8000
_GEMODEL = struct.Struct("=IIII")  # struct tc_netem_gemodel: p, r, h, k1
_SLOT = struct.Struct(
    "=qqiiqq"
)  # struct tc_netem_slot: min_delay, max_delay (ns), max_packets, max_bytes, dist_delay, dist_jitter
_NETEM_DIST_MAX = 16384  # the kernel's limit on a table's entries (sch_netem.c)


@functools.cache
def _read_distribution(path):
    """A tc distribution file as the kernel takes it: signed 16-bit values, '#' starting a comment line."""
    values = []
    with open(path) as f:
        for line in f:
            if not line.lstrip().startswith("#"):
                values.extend(int(v) for v in line.split())
    if not 0 < len(values) <= _NETEM_DIST_MAX or not all(-32768 <= v <= 32767 for v in values):
        raise LabError(
            f"{path}: not a netem distribution table ({len(values)} values; 1..{_NETEM_DIST_MAX} "
            "signed 16-bit values expected)"
        )
    return struct.pack(f"={len(values)}h", *values)


def _frame(way):
    """(rated, netem): the tree a way needs, every phase of a changing one included (each change then only changes
    what is there: an htb class whose rate steps, a netem whose parameters step)."""
    phases = [phase for _, phase in way.phases]
    return any(p.rate_bps is not None for p in phases), any(p.needs_netem for p in phases)


def shape_egress(namespace, ifname, way, seed=None):
    """Install the qdiscs for one direction (a model.OneWay) on an interface; unimpaired adds nothing. seed: its
    netem's generator (netem_seed), or None."""
    if all(phase.is_unimpaired for _, phase in way.phases):
        return []
    session = session_for(namespace)
    index = session and session.known_index(ifname)
    if index:
        # The session knows the index (it created the interface): one batch, sent from this thread.
        requests, installed = _requests(index, way, seed)
        try:
            session.batch(f"installing qdiscs on {ifname} ({way.describe()})", requests)
        except LabError as exc:
            raise LabError(f"installing qdiscs on {ifname} in {namespace} ({way.describe()}) failed: {exc}") from exc
        return installed
    try:
        return with_iproute(namespace, lambda ipr: _install(ipr, ifname, way, seed), f"installing qdiscs on {ifname}")
    except NetlinkError as exc:
        raise LabError(f"installing qdiscs on {ifname} in {namespace} ({way.describe()}) failed: {exc}") from exc


def _install(ipr, ifname, way, seed):
    """The qdisc tree for one direction, on an IPRoute socket already in the router's namespace."""
    requests, installed = _requests(_index(ipr, ifname), way, seed)
    if any("options_extra" in kwargs for _, _, kwargs in requests):
        raise LabError(
            f"a netem distribution table, loss model, slot or seed on {ifname} needs an interface the lab created "
            "(its batched path)"
        )
    for _, command, kwargs in requests:
        ipr.tc(command, **kwargs)
    return installed


def _requests(index, way, seed=None):
    """([("tc", command, kwargs)], descriptions) of the qdisc tree for one direction on interface `index`."""
    rated, netem = _frame(way)
    if not rated and way.police_bps is None:
        if not netem:
            return [], []
        kwargs = _netem_kwargs(way, seed=seed)
        return [("tc", "add", dict(kind="netem", index=index, handle=_LEAF, **kwargs))], [_describe_netem(kwargs, way)]
    requests = [("tc", "add", dict(kind="htb", index=index, handle=_ROOT, default=1))]
    more, installed = _class_requests(index, _RATE_CLASS, _LEAF, way, rate_bps=UNLIMITED_CLASS_BPS, seed=seed)
    if way.police_bps:
        # Every packet meets the policer on its way into the class: a match-all u32 filter with a police action.
        requests.append(
            (
                "tc",
                "add-filter",
                dict(
                    kind="u32",
                    index=index,
                    parent=_ROOT,
                    prio=1,
                    protocol=_ETH_P_ALL,
                    target=_RATE_CLASS,
                    keys=["0x0/0x0+0"],
                    action=_police(way),
                ),
            )
        )
        installed.insert(0, _describe_police(way))
    return requests + more, installed


def _police(way):
    """pyroute2's police action for a way: above police_bps, beyond a bucket of police_burst_bytes, drop."""
    return [dict(kind="police", rate=f"{int(way.police_bps)}bit", burst=way.police_burst_bytes, limit=0, action="drop")]


def _describe_police(way):
    return f"police rate {int(way.police_bps)}bit burst {way.police_burst_bytes}b drop"


def _child_handle(leaf):
    """The handle of the queue under a netem leaf: its major with the top bit set (leaf majors stay under 0x8000)."""
    return leaf | 0x80000000


def _queue_request(index, handle, parent, queue):
    kind, options = queue_options(queue)
    return (
        "tc",
        "add-raw",
        dict(
            index=index,
            handle=handle,
            parent=parent,
            kind=kind,
            options=options,
            nested_flag=options_flagged_nested(kind),
        ),
    )


def _class_requests(index, classid, leaf, way, rate_bps=None, seed=None):
    """An htb class under 1: at the way's rate (or rate_bps) and its leaf: netem if the way needs it (with the
    way's queue under its delay line), else the way's queue (pfifo when none was asked)."""
    rate = int(way.rate_bps or rate_bps)
    burst = htb_burst_bytes(rate)
    # quantum: a few frames; the default (rate/r2q) overflows at Gbit rates.
    requests = [
        (
            "tc",
            "add-class",
            dict(
                kind="htb",
                index=index,
                handle=classid,
                parent=_ROOT,
                rate=f"{rate}bit",
                ceil=f"{rate}bit",
                burst=burst,
                cburst=burst,
                quantum=min(200000, max(MTU_FRAME_BYTES, burst)),
            ),
        )
    ]
    installed = [f"htb rate {rate}bit burst {burst}b"] if way.rate_bps else []
    if _frame(way)[1]:
        kwargs = _netem_kwargs(way, seed=seed)
        requests.append(("tc", "add", dict(kind="netem", index=index, handle=leaf, parent=classid, **kwargs)))
        installed.append(_describe_netem(kwargs, way))
        if way.queue is not None:
            # After the delay line, so a packet's delay and its queueing add up as on a real path (netem hands
            # each packet whose time has come to its child, and htb dequeues the child at the link's rate).
            requests.append(_queue_request(index, _child_handle(leaf), leaf | 1, way.queue))
            installed.append(way.queue.describe())
    elif way.queue is not None:
        requests.append(_queue_request(index, leaf, classid, way.queue))
        installed.append(way.queue.describe())
    else:
        requests.append(
            ("tc", "add", dict(kind="pfifo", index=index, handle=leaf, parent=classid, limit=way.queue_limit_packets()))
        )
        installed.append(f"pfifo limit {way.queue_limit_packets()}")
    return requests, installed


def prepare_change(namespace, changes):
    """Compile change_egress(namespace, changes)'s message ahead of its time."""
    from .rtnl import precompile

    precompile(_changes_requests(namespace, changes)[0])


def timed_change(namespace, changes, first_seq):
    """change_egress's message for another process to send at its time: (fd, bytes, [seq, ...]).

    fd is a NETLINK_ROUTE socket of the namespace kept for timed changes (the session's own socket
    answers its own queries: a second reader would take their answers).
    """
    from .rtnl import compile_batch

    requests, _ = _changes_requests(namespace, changes)
    sock = session_for(namespace).resource("timed change socket", _route_socket)
    data, seqs = compile_batch(requests, first_seq)
    return sock.fileno(), data, seqs


def _route_socket():
    import socket

    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE)
    sock.bind((0, 0))
    return sock


def _changes_requests(namespace, changes):
    session = session_for(namespace)
    requests, indexes = [], {}
    for ifname, way, frame_way, seed in changes:
        index = indexes[ifname] = session and session.known_index(ifname)
        if not index:
            raise LabError(f"changing {ifname} in {namespace} needs an interface the lab created")
        requests += _change_requests(index, way, frame_way, seed)
    return requests, indexes


def change_egress(namespace, changes):
    """Change qdiscs shape_egress installed, in place: changes = [(ifname, way, frame_way, seed)], each interface's
    tree (built for frame_way, a changing OneWay, with netem seed `seed` or None) to `way`, one of its phases. One
    netlink message for all of them (htb class, then netem or the pfifo leaf, per interface), then the settings read
    back.

    Returns (acked_at, {ifname: settings}): the monotonic time the kernel's acks arrived (it applies a change
    before acking it) and {"rate_bps", "delay_s", "jitter_s", "loss", "limit", ...} as the kernel then held them.
    """
    import time

    requests, indexes = _changes_requests(namespace, changes)
    session_for(namespace).batch(
        f"changing {', '.join(f'{ifname} to {way.describe()}' for ifname, way, _, _ in changes)}", requests
    )
    return time.monotonic(), read_back_egress(namespace, indexes)


def read_back_egress(namespace, ifnames):
    """{ifname: {"rate_bps", "delay_s", "jitter_s", "loss", "limit", ...}} as the kernel holds them now."""
    session = session_for(namespace)
    indexes = {ifname: session.known_index(ifname) for ifname in ifnames}
    # One dump per message: the kernel serves a socket one dump at a time (EBUSY otherwise).
    (qdiscs,) = session.query(f"reading qdiscs back in {namespace}", [("tc", "dump", {})])
    settings = {}
    for ifname, index in indexes.items():
        (classes,) = session.query(f"reading {ifname}'s classes back", [("tc", "dump-class", {"index": index})])
        held = settings[ifname] = {}
        for msg in classes:
            if msg["index"] == index and msg["handle"] == _RATE_CLASS:
                held["rate_bps"] = _htb_rate_bps(msg)
        for stats in _stats([msg for msg in qdiscs if msg["index"] == index]):
            if stats["kind"] == "netem":
                held.update({k: v for k, v in stats["settings"].items() if v is not None})
            elif stats["kind"] == "pfifo" and stats["handle"] == _LEAF:
                held["limit"] = stats["settings"].get("limit")
    return settings


def _change_requests(index, way, frame_way, seed=None):
    """The in-place change of one interface's tree (built for frame_way) to `way`: what `tc class change` and
    `tc qdisc change` would send, netem with every field (a step must not leave another's old value) and, seeded,
    the seed of this phase (a change reseeds netem: each phase draws its own reproducible sequence)."""
    rated, netem = _frame(frame_way)
    requests, parent = [], None
    if rated or frame_way.police_bps:
        rate = int(way.rate_bps or UNLIMITED_CLASS_BPS)
        burst = htb_burst_bytes(rate)
        requests.append(
            (
                "tc",
                "change-class",
                dict(
                    kind="htb",
                    index=index,
                    handle=_RATE_CLASS,
                    parent=_ROOT,
                    rate=f"{rate}bit",
                    ceil=f"{rate}bit",
                    burst=burst,
                    cburst=burst,
                    quantum=min(200000, max(MTU_FRAME_BYTES, burst)),
                ),
            )
        )
        parent = _RATE_CLASS
    if netem:
        where = {} if parent is None else {"parent": parent}
        requests.append(
            (
                "tc",
                "change",
                dict(
                    kind="netem",
                    index=index,
                    handle=_LEAF,
                    **where,
                    **_netem_kwargs(
                        way, seed=None if seed is None else netem_seed(seed, _phase(way, frame_way)), every_field=True
                    ),
                ),
            )
        )
    elif way.queue is None:
        requests.append(
            (
                "tc",
                "change",
                dict(kind="pfifo", index=index, handle=_LEAF, parent=parent, limit=way.queue_limit_packets()),
            )
        )
    return requests


def _phase(way, frame_way):
    """Which of frame_way's phases `way` is (the first equal one), to name its seed."""
    return next((i for i, (_, phase) in enumerate(frame_way.phases) if phase == way), way.describe())


def _htb_rate_bps(msg):
    """An htb class's rate in bit/s (RATE64 where the 32-bit field cannot hold it)."""
    options = msg.get_attr("TCA_OPTIONS")
    rate64 = options and options.get_attr("TCA_HTB_RATE64")
    parms = options and options.get_attr("TCA_HTB_PARMS")
    if rate64:
        return rate64 * 8
    return parms["rate"] * 8 if parms else None


def _describe_netem(kwargs, way):
    return " ".join(
        [
            "netem",
            *(f"{k}={v}" for k, v in kwargs.items() if k != "options_extra"),
            *(f"seed={_U64.unpack(v)[0]}" for k, v in kwargs.get("options_extra", ()) if k == _TCA_NETEM_PRNG_SEED),
            *([f"distribution={way.distribution}"] if way.distribution != "uniform" else []),
            *([way.loss_model.describe()] if way.loss_model else []),
            *([way.slot.describe()] if way.slot else []),
        ]
    )


#: The rate of a class that only impairs (no rate asked): far above what a veth carries here, so
#: htb never holds a packet back, while the class still gives its traffic a netem of its own.
UNLIMITED_CLASS_BPS = 10_000_000_000
_ETH_P_IP = 0x0800
_ETH_P_ALL = 0x0003


def shape_egress_classes(namespace, ifname, classes, seed=None):
    """Shape chosen traffic only: [(matches, way)], the packets of any of a class's matches through its own htb
    class and leaf.

    A match is {"src": address, "dst": address, "sport": port, "dport": port, "family": 4 or 6}
    (all given keys must hold; IPv4 or IPv6 addresses, family only where no address says it,
    IPv4 by default; ports are TCP's, assuming no IP options or extension headers, as tc's
    `match ip dport` does). Traffic no match takes leaves unshaped (htb's direct queue).
    Returns {class description: [installed]}. seed: the interface's netem seed (each class's netem draws its own).
    """
    session = session_for(namespace)
    index = session and session.known_index(ifname)
    if not index:
        raise LabError(f"shaping classes on {ifname} needs an interface the lab created in {namespace}")
    if not 0 < len(classes) < 0x7FF0:
        raise LabError(f"shaping classes on {ifname}: 1..{0x7FEF} classes, got {len(classes)}")
    requests = [("tc", "add", dict(kind="htb", index=index, handle=_ROOT, default=0))]
    installed = {}
    for number, (matches, way) in enumerate(classes, start=1):
        classid = _ROOT | number
        more, lines = _class_requests(
            index,
            classid,
            (0x10 + number) << 16,
            way,
            rate_bps=UNLIMITED_CLASS_BPS,
            seed=None if seed is None else netem_seed(seed, number),
        )
        requests += more
        for match in matches:
            protocol, keys = u32_keys(match)
            # One protocol per filter priority (the kernel refuses an IPv6 filter beside IPv4 ones at one prio).
            police = dict(action=_police(way)) if way.police_bps else {}
            requests.append(
                (
                    "tc",
                    "add-filter",
                    dict(
                        kind="u32",
                        index=index,
                        parent=_ROOT,
                        prio=1 if protocol == _ETH_P_IP else 2,
                        protocol=protocol,
                        target=classid,
                        keys=keys,
                        **police,
                    ),
                )
            )
        installed[" or ".join(describe_match(match) for match in matches)] = (
            [_describe_police(way)] if way.police_bps else []
        ) + lines
    session.batch(f"installing classified qdiscs on {ifname}", requests)
    return installed


_ETH_P_IPV6 = 0x86DD
_IP_PROTOCOL_TCP = "0x00060000/0x00ff0000+8"  # IPv4: the protocol byte (offset 9)
_IPV6_NEXT_HEADER_TCP = "0x00000600/0x0000ff00+4"  # IPv6: the next-header byte (offset 6)


def u32_keys(match):
    """(ethertype, u32 selector keys "value/mask+offset") for a match dict; ValueError on a bad one."""
    unknown = set(match) - {"src", "dst", "sport", "dport", "family"}
    if unknown or not set(match) - {"family"}:
        raise ValueError(
            f"match: keys must be among src, dst, sport, dport, family (at least one but family), got {sorted(match)}"
        )
    addresses = {field: ipaddress.ip_address(match[field]) for field in ("src", "dst") if field in match}
    versions = {address.version for address in addresses.values()} | ({match["family"]} if "family" in match else set())
    if len(versions) > 1 or not versions <= {4, 6}:
        raise ValueError(f"match: one address family (4 or 6) for src, dst and family, got {match}")
    for field in ("sport", "dport"):
        if field in match and (
            isinstance(match[field], bool) or not isinstance(match[field], int) or not 1 <= match[field] <= 65535
        ):
            raise ValueError(f"match.{field}: a TCP port in 1..65535, got {match[field]!r}")
    v6 = versions == {6}
    keys = []
    for field, offset in (("src", 8 if v6 else 12), ("dst", 24 if v6 else 16)):
        if field in addresses:
            packed = addresses[field].packed
            keys += [f"0x{packed[i : i + 4].hex()}/0xffffffff+{offset + i}" for i in range(0, len(packed), 4)]
    if "sport" in match or "dport" in match:
        keys.append(_IPV6_NEXT_HEADER_TCP if v6 else _IP_PROTOCOL_TCP)
    ports = 40 if v6 else 20  # the TCP header right after a header without options
    if "sport" in match:
        keys.append(f"0x{match['sport'] << 16:08x}/0xffff0000+{ports}")
    if "dport" in match:
        keys.append(f"0x{match['dport']:08x}/0x0000ffff+{ports}")
    return (_ETH_P_IPV6 if v6 else _ETH_P_IP), keys


def describe_match(match):
    """'src 198.19.0.2, dport 5201' (', IPv6' where only the family says it)."""
    words = [f"{k} {match[k]}" for k in ("src", "dst", "sport", "dport") if k in match]
    if match.get("family") == 6 and not {"src", "dst"} & set(match):
        words.append("IPv6")
    return ", ".join(words)


def qdisc_stats(namespace, ifname):
    """[{kind, handle, parent, packets, bytes, drops, overlimits, backlog}] of an interface's qdiscs."""
    return qdisc_stats_of(namespace, [ifname])[ifname]


def qdisc_stats_of(namespace, ifnames):
    """{ifname: qdisc_stats(namespace, ifname)} for several interfaces, from one dump where the session allows."""
    session = session_for(namespace)
    indexes = {ifname: session and session.known_index(ifname) for ifname in ifnames}
    if all(indexes.values()):
        # From this thread on the session's plain socket: no hop, no IPRoute to open.
        (answer,) = session.query(f"reading qdisc stats of {', '.join(ifnames)}", [("tc", "dump", {})])
        return {ifname: _stats([msg for msg in answer if msg["index"] == index]) for ifname, index in indexes.items()}
    return _per_interface(
        namespace, ifnames, "reading qdisc stats", lambda ipr, index: _stats(ipr.get_qdiscs(index=index))
    )


def flow_queues_of(namespace, ifnames):
    """{ifname: how many per-flow queues its fq_codel lists now}: one class per queue on fq_codel's lists of new and
    old flows, which hold packets or held them a round ago."""

    def count(messages):
        return sum(msg.get_attr("TCA_KIND") == "fq_codel" for msg in messages)

    session = session_for(namespace)
    indexes = {ifname: session.known_index(ifname) for ifname in ifnames} if session is not None else {}
    if session is not None and all(indexes.values()):
        # A class dump answers one request: one query per interface, on the session's socket from this thread.
        return {
            ifname: count(
                session.query(f"reading the per-flow queues of {ifname}", [("tc", "dump-class", {"index": index})])[0]
            )
            for ifname, index in indexes.items()
        }
    return _per_interface(
        namespace, ifnames, "reading the per-flow queues", lambda ipr, index: count(ipr.get_classes(index=index))
    )


def _per_interface(namespace, ifnames, step, read):
    """{ifname: read(ipr, its index)} through an IPRoute in the namespace: where the session does not know them."""
    return {
        ifname: with_iproute(
            namespace, lambda ipr, ifname=ifname: read(ipr, _index(ipr, ifname)), f"{step} of {ifname}"
        )
        for ifname in ifnames
    }


def _stats(messages):
    result = []
    for msg in messages:
        # TCA_STATS2 is the maintained counter set (the legacy TCA_STATS names it "drop").
        stats2 = msg.get_attr("TCA_STATS2")
        basic = (stats2 and stats2.get_attr("TCA_STATS_BASIC")) or {}
        queue = (stats2 and stats2.get_attr("TCA_STATS_QUEUE")) or {}
        result.append(
            {
                "kind": msg.get_attr("TCA_KIND"),
                "handle": msg["handle"],
                "parent": msg["parent"],
                "packets": basic.get("packets", 0),
                "bytes": basic.get("bytes", 0),
                "drops": queue.get("drops", 0),
                "overlimits": queue.get("overlimits", 0),
                "backlog": queue.get("backlog", 0),
            }
        )
        if result[-1]["kind"] == "netem":
            result[-1]["settings"] = _netem_settings(msg.get_attr("TCA_OPTIONS"))
        elif result[-1]["kind"] in _QUEUE_KINDS:
            result[-1].update(read_queue(msg))
    return result


_QUEUE_KINDS = frozenset({"pfifo", "bfifo", "fq_codel", "codel", "pie", "fq_pie", "cake", "red", "fq"})


def _percent(u32):
    return round(u32 / 2**32 * 100, 4)


def _netem_settings(options):
    """What the kernel holds for a netem qdisc (percentages as tc shows them): read back, not what was asked."""
    if options is None:
        return {}
    settings = {
        "limit": options.get("limit"),
        "loss": _percent(options.get("loss", 0)),
        "gap": options.get("gap"),
        "duplicate": _percent(options.get("duplicate", 0)),
        # The kernel reports delay and jitter in psched ticks of 64 ns (PSCHED_SHIFT), capped at 2^32 - 1.
        "delay_s": options.get("delay", 0) * 64 / 1e9,
        "jitter_s": options.get("jitter", 0) * 64 / 1e9,
    }
    for attr, fields in (
        (
            "TCA_NETEM_CORR",
            {"delay_corr": "jitter_correlation", "loss_corr": "loss_correlation", "dup_corr": "duplicate_correlation"},
        ),
        ("TCA_NETEM_REORDER", {"prob_reorder": "reorder", "corr_reorder": "reorder_correlation"}),
        ("TCA_NETEM_CORRUPT", {"prob_corrupt": "corrupt", "corr_corrupt": "corrupt_correlation"}),
    ):
        nested = options.get_attr(attr) or {}
        for field, name in fields.items():
            settings[name] = _percent(nested.get(field, 0))
    settings["seed"] = _netem_seed_held(options)
    return settings


def _netem_seed_held(options):
    """The seed netem's generator holds (Linux >= 6.6 reports it; pyroute2 does not decode it), else None."""
    for name, attr in options["attrs"]:
        if name != "UNKNOWN":
            continue
        length, kind = struct.unpack_from("=HH", attr.data, attr.offset)
        if kind & 0x3FFF == _TCA_NETEM_PRNG_SEED and length >= 4 + _U64.size:
            return _U64.unpack_from(attr.data, attr.offset + 4)[0]
    return None
