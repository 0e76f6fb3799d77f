"""The bottleneck's queue disciplines as the kernel takes them: TCA_OPTIONS encoded here, settings and marks read back.

pyroute2 0.9 encodes a few of these qdiscs (fq_codel, codel, cake) under names it says will
change, and none of pie, fq_pie, red, fq or bfifo; one encoder for all of them, from
include/uapi/linux/pkt_sched.h, keeps every queue on the same path and the bytes testable.
"""

import math
import struct

from ..model.queues import CAKE_DIFFSERV_MODES, CAKE_FLOW_MODES, Queue
from .rtnl import nlattr

__all__ = ["queue_options", "options_flagged_nested", "read_queue", "decode_queue"]

_U32 = struct.Struct("=I")
_S32 = struct.Struct("=i")
_U64 = struct.Struct("=Q")
_FIFO = struct.Struct("=I")  # struct tc_fifo_qopt: limit
_RED_QOPT = struct.Struct("=IIIBBBB")  # struct tc_red_qopt: limit, qth_min, qth_max, Wlog, Plog, Scell_log, flags
_TC_RED_ECN, _TC_RED_HARDDROP, _TC_RED_ADAPTATIVE, _TC_RED_SUPPORTED_FLAGS = 1, 2, 4, 0x0F
_TCA_RED_FLAGS = 4
_BITFIELD32 = struct.Struct("=II")  # struct nla_bitfield32: value, selector


def _us(seconds):
    return round(seconds * 1e6)


# kind -> {option: (attribute type, encoder)}; "ecn" and "limit" are the Link's own fields.
_ATTRS = {
    "fq_codel": {
        "target": (1, _us),
        "limit": (2, int),
        "interval": (3, _us),
        "ecn": (4, int),
        "flows": (5, int),
        "quantum": (6, int),
        "ce_threshold": (7, _us),
        "drop_batch": (8, int),
        "memory_limit": (9, int),
    },
    "codel": {"target": (1, _us), "limit": (2, int), "interval": (3, _us), "ecn": (4, int), "ce_threshold": (5, _us)},
    "pie": {
        "target": (1, _us),
        "limit": (2, int),
        "tupdate": (3, _us),
        "alpha": (4, int),
        "beta": (5, int),
        "ecn": (6, int),
        "bytemode": (7, int),
        "dq_rate_estimator": (8, int),
    },
    "fq_pie": {
        "limit": (1, int),
        "flows": (2, int),
        "target": (3, _us),
        "tupdate": (4, _us),
        "alpha": (5, int),
        "beta": (6, int),
        "quantum": (7, int),
        "memory_limit": (8, int),
        "ecn_prob": (9, lambda p: round(p * 100)),
        "ecn": (10, int),
        "bytemode": (11, int),
        "dq_rate_estimator": (12, int),
    },
    "cake": {
        "diffserv": (3, CAKE_DIFFSERV_MODES.index),
        "flow_mode": (5, CAKE_FLOW_MODES.index),
        "overhead": (6, None),
        "rtt": (7, _us),
        "memory": (10, int),
        "nat": (11, int),
        "wash": (13, int),
        "mpu": (14, int),
        "ack_filter": (16, int),
        "split_gso": (17, int),
    },
    "fq": {
        "limit": (1, int),
        "flow_limit": (2, int),
        "quantum": (3, int),
        "initial_quantum": (4, int),
        "pacing": (5, int),
        "maxrate": (7, lambda bps: min(2**32 - 1, round(bps / 8))),
        "buckets": (8, lambda n: max(1, math.ceil(math.log2(n)))),
        "ce_threshold": (12, _us),
        "horizon": (14, _us),
    },
}
_CAKE_BASE_RATE64, _CAKE_OVERHEAD, _CAKE_TARGET, _CAKE_AUTORATE = 2, 6, 8, 9


#: Kinds whose TCA_OPTIONS must carry NLA_F_NESTED: they parse it strictly (nla_parse_nested), as fq_pie
#: (5.6) does; the older ones take it either way, and tc sends it only for these.
_STRICTLY_NESTED = frozenset({"fq_pie"})


def options_flagged_nested(kind):
    """Whether `kind`'s TCA_OPTIONS goes with NLA_F_NESTED (as tc sends it)."""
    return kind in _STRICTLY_NESTED


def queue_options(queue):
    """(kind, TCA_OPTIONS payload bytes) for a model.Queue, as `tc qdisc add ... <kind> ...` sends them."""
    if not isinstance(queue, Queue):
        raise TypeError(f"queue: expected a model Queue, got {queue!r}")
    if queue.kind in ("pfifo", "bfifo"):
        limit = queue.limit if queue.limit is not None else (1000 if queue.kind == "pfifo" else 1000 * 1514)
        return queue.kind, _FIFO.pack(limit)
    if queue.kind == "red":
        return "red", _red_options(queue)
    attrs = _ATTRS[queue.kind]
    values = dict(queue.options)
    if queue.limit is not None:
        values["limit"] = queue.limit
    if queue.ecn is not None:
        values["ecn"] = queue.ecn
    payload = b""
    if queue.kind == "cake":
        # As tc: unlimited (the link's htb class shapes; cake queues under it), no autorate, and with an rtt its
        # target of rtt/20 (the kernel keeps 5 ms unless told).
        payload += nlattr(_CAKE_BASE_RATE64, _U64.pack(0)) + nlattr(_CAKE_AUTORATE, _U32.pack(0))
        if "rtt" in values:
            payload += nlattr(_CAKE_TARGET, _U32.pack(max(1, _us(values["rtt"]) // 20)))
    for name, value in sorted(values.items()):
        kind, encode = attrs[name]
        if kind == _CAKE_OVERHEAD and queue.kind == "cake":
            payload += nlattr(kind, _S32.pack(value))
        else:
            payload += nlattr(kind, _U32.pack(encode(value)))
    return queue.kind, payload


# red: iproute2's tc/tc_red.c, the same arithmetic, so `tc qdisc show` reads what `tc qdisc add ... red` would set.
_TICKS_PER_US = 1000 / 64  # /proc/net/psched: t2us 1000, us2t 64 on every kernel since 2.6.x


def _red_options(queue):
    o = dict(queue.options)
    low, high, avpkt, probability = o["min"], o["max"], o["avpkt"], o["probability"]
    burst = o.get("burst") or max(1, math.ceil((2 * low + high) / (3 * avpkt)))
    wlog = _red_ewma(low, burst, avpkt)
    plog = _red_p(low, high, probability)
    scell_log, stab = _red_idle_damping(wlog, avpkt, o["bandwidth"] / 8)
    flags = (
        (_TC_RED_ECN if queue.ecn else 0)
        | (_TC_RED_HARDDROP if o.get("harddrop") else 0)
        | (_TC_RED_ADAPTATIVE if o.get("adaptive") else 0)
    )
    # As tc since 5.7: the flags in TCA_RED_FLAGS (a bitfield with its selector), none in the legacy field.
    qopt = _RED_QOPT.pack(queue.limit, low, high, wlog, plog, scell_log, 0)
    max_p = min(2**32 - 1, int(probability * 2**32))
    return (
        nlattr(1, qopt)
        + nlattr(2, stab)
        + nlattr(3, _U32.pack(max_p))
        + nlattr(_TCA_RED_FLAGS, _BITFIELD32.pack(flags, _TC_RED_SUPPORTED_FLAGS))
    )


def _red_ewma(qmin, burst, avpkt):
    a = burst + 1 - qmin / avpkt
    if a < 1.0:
        raise ValueError(
            f"queue_options.burst: red's burst {burst} is too small for min {qmin} B; try {1 + qmin // avpkt}"
        )
    w = 0.5
    for wlog in range(1, 32):
        if a <= (1 - (1 - w) ** burst) / w:
            return wlog
        w /= 2
    raise ValueError(f"queue_options.burst: red finds no averaging weight for burst {burst}")


def _red_p(qmin, qmax, probability):
    span = qmax - qmin
    p = probability / span
    for plog in range(32):
        if p > 1.0:
            return plog
        p *= 2
    raise ValueError(f"queue_options.probability: too small for red's thresholds ({probability})")


def _red_idle_damping(wlog, avpkt, rate_bytes_per_s):
    xmit_ticks = 1e6 * avpkt / rate_bytes_per_s * _TICKS_PER_US
    lw = -math.log(1.0 - 1.0 / (1 << wlog)) / xmit_ticks
    maxtime = 31 / lw
    for clog in range(32):
        if maxtime / (1 << clog) < 512:
            break
    else:
        raise ValueError("queue_options.bandwidth: red cannot damp idle periods at this rate")
    table = bytes([0] + [min(31, int((i << clog) * lw)) for i in range(1, 255)] + [31])
    return clog, table


# -- reading back ---------------------------------------------------------------------------------
_NLA = struct.Struct("=HH")
_TCMSG_ATTRS = 16 + 20
_TCA_OPTIONS, _TCA_XSTATS = 2, 4


def _attrs(data, offset=0, end=None):
    """{type: payload bytes} of the netlink attributes in data[offset:end] (types without the flag bits)."""
    end = len(data) if end is None else end
    found = {}
    while offset + _NLA.size <= end:
        length, kind = _NLA.unpack_from(data, offset)
        if length < _NLA.size:
            break
        found[kind & 0x3FFF] = bytes(data[offset + _NLA.size : offset + length])
        offset += (length + 3) & ~3
    return found


# kind -> [(xstats offset, struct)] of its mark counters, summed: the ECN marks of its AQM and, where it has one,
# the marks above ce_threshold (a DCTCP-style step), which the kernel counts apart (pkt_sched.h's *_xstats).
_XSTATS_MARKS = {
    "fq_codel": [(12, _U32), (28, _U32)],
    "codel": [(24, _U32), (32, _U32)],
    "pie": [(36, _U32)],
    "fq_pie": [(16, _U32)],
    "red": [(12, _U32)],
    "fq": [(80, _U64)],
}


def read_queue(msg):
    """decode_queue of a dumped qdisc message (pyroute2's): its kind, TCA_OPTIONS and TCA_XSTATS."""
    data = msg.data[msg.offset : msg.offset + msg.length] if msg.length else msg.data
    top = _attrs(data, _TCMSG_ATTRS)
    return decode_queue(msg.get_attr("TCA_KIND"), top.get(_TCA_OPTIONS, b""), top.get(_TCA_XSTATS, b""))


def decode_queue(kind, options, xstats=b""):
    """{"settings": {...}, "ecn_marks": n or None} from a queue qdisc's TCA_OPTIONS and TCA_XSTATS payloads.

    Settings are what the kernel holds, in the Link's units: seconds, bytes, packets,
    True/False; "limit" for every kind that has one. ECN marks come from the kind's xstats, its
    AQM's and its ce_threshold's together (None where the kind keeps none this module reads:
    cake counts per tin; the FIFOs mark nothing).
    """
    settings = {}
    if kind in ("pfifo", "bfifo") and len(options) >= 4:
        settings["limit"] = _U32.unpack_from(options)[0]
    elif kind == "red":
        nested = _attrs(options)
        if 1 in nested:
            limit, low, high, _, _, _, flags = _RED_QOPT.unpack_from(nested[1])
            if _TCA_RED_FLAGS in nested:
                flags |= _BITFIELD32.unpack_from(nested[_TCA_RED_FLAGS])[0]
            settings.update(limit=limit, min=low, max=high, ecn=bool(flags & _TC_RED_ECN))
        if 3 in nested:
            settings["probability"] = round(_U32.unpack(nested[3])[0] / 2**32, 4)
    elif kind in _ATTRS:
        nested = _attrs(options)
        for name, (attr, encode) in _ATTRS[kind].items():
            raw = nested.get(attr)
            if raw is None or len(raw) < 4:
                continue
            value = _S32.unpack_from(raw)[0] if (kind, name) == ("cake", "overhead") else _U32.unpack_from(raw)[0]
            settings[name] = _decode(kind, name, value, encode)
    marks = None
    counters = _XSTATS_MARKS.get(kind, [])
    if counters and all(len(xstats) >= offset + layout.size for offset, layout in counters):
        marks = sum(layout.unpack_from(xstats, offset)[0] for offset, layout in counters)
    return {"settings": settings, "ecn_marks": marks}


def _decode(kind, name, value, encode):
    if encode is _us:
        return value / 1e6
    if name in ("ecn", "bytemode", "dq_rate_estimator", "nat", "wash", "split_gso", "pacing"):
        return bool(value)
    if name == "ack_filter":
        return value != 0
    if name == "diffserv":
        return CAKE_DIFFSERV_MODES[value] if value < len(CAKE_DIFFSERV_MODES) else value
    if name == "flow_mode":
        value &= 7  # the NAT flag rides in the same word
        return CAKE_FLOW_MODES[value] if value < len(CAKE_FLOW_MODES) else value
    if name == "ecn_prob":
        return value / 100
    if name == "maxrate":
        return value * 8
    if name == "buckets":
        return 1 << value
    return value
