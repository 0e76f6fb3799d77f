"""Each flow's share of a bottleneck it crossed beside others (model.shares), from who ran beside whom."""

import dataclasses

__all__ = ["with_shares"]


def with_shares(flows, streams, bottleneck, *, what="the bottleneck"):
    """The flows (TransferResults that crossed `bottleneck`, a Link, at once) each with its share of it, per direction.

    UDP streams (UdpResults) on it take their rate first. Shares follow who ran beside whom (the measured spans: a
    flow that ran alone part of its time is owed the whole link then, at the low end only what its window can grow
    to: model.shares.regrown_rate), each flow capped by its own bounds (model.shares). Flows that met fewer of an
    fq_codel's per-flow queues than they were get a share with no number and the reason. An unshaped or changing
    direction, or a flow with nothing beside it, is left as it is.
    """
    from ..model import link_goodput
    from ..model.shares import Share

    shared = list(flows)
    for direction, way in (("download", bottleneck.toward_client), ("upload", bottleneck.toward_server)):
        group = [i for i, f in enumerate(flows) if f.direction == direction]
        beside = [u for u in streams if getattr(u.spec, "direction", "download") == direction]
        if not group or len(group) + len(beside) < 2 or not way.rate_bps or way.changes:
            continue
        conditions = [flows[i].model_conditions() for i in group]
        capacity = link_goodput(way.rate_bps, conditions[0].mss_bytes)
        contenders = [_contender(flows[i], c, way) for i, c in zip(group, conditions)]
        shared_queue = _shared_flow_queue([flows[i] for i in group], contenders, beside, way, direction, capacity)
        if shared_queue:
            shares = [Share(None, f"{shared_queue} ({what})", len(group))] * len(group)
        else:
            shares = _time_weighted_shares([flows[i] for i in group], contenders, beside, way, capacity, what)
        for i, share in zip(group, shares):
            if share is not None:
                shared[i] = dataclasses.replace(flows[i], share=share)
    return shared


def _shared_flow_queue(flows, contenders, streams, way, direction, capacity):
    """Why the flows are owed no per-flow share of an fq_codel bottleneck whose per-flow queues they did not each get
    ("" where they did, or where that cannot be told): fewer queues listed at once than flows that each kept one
    (measure.flow_queues). Judged for bulk flows alone, each able to take more than an equal share: a flow held
    below it elsewhere, or a UDP stream, may empty its queue between reads."""
    if way.queue is None or way.queue.kind != "fq_codel" or streams:
        return ""
    if any(c.own_bps is not None and c.own_bps < capacity / len(flows) for c in contenders):
        return ""
    toward = "toward_client" if direction == "download" else "toward_server"
    ifnames = set.intersection(
        *({ifname for ifname, (d, w) in flow.shaped_ways.items() if d == toward and w == way} for flow in flows)
    )
    seen = [flow.flow_queues[ifname] for flow in flows for ifname in ifnames if ifname in flow.flow_queues]
    spans = [(f.first_byte_at, f.receiver.last_byte_at or f.first_byte_at) for f in flows]
    together = max(sum(first <= start < last for first, last in spans) for start, _ in spans)
    if not seen or max(seen) >= together:
        return ""
    buckets = way.queue.option("flows", 1024)
    return (
        f"{together} flows through fq_codel at once met at most {max(seen)} of its per-flow queues: flows that hash "
        f"into one of its {buckets} queues share it as a FIFO (about 1 pair in {buckets}), so none is owed an equal "
        "share"
    )


def _contender(flow, conditions, way):
    """A flow (with its model Conditions) as its share needs it: its own bound alone (the model's, the shared link
    left out), cc and RTT."""
    from ..model import expected_throughput
    from ..model.shares import Contender

    alone = expected_throughput(dataclasses.replace(conditions, nbytes=None))
    own = [bps for name, bps in alone.bounds.items() if name != "link"]
    if conditions.rate_bps and conditions.rate_bps < way.rate_bps:
        own.append(alone.bounds["link"])  # an access link slower than the bottleneck
    return Contender(min(own) if own else None, conditions.cc or "cubic", flow.link.rtt_s)


def _time_weighted_shares(flows, contenders, streams, way, capacity, what):
    """Each flow's Share averaged over its measured span, cut where a flow or stream starts or ends (None: a flow
    with no span); every share unestablished where any set of flows has no established model. A flow left more than
    it had is owed, at the low end, what its window grows to meanwhile (model.shares.regrown_rate)."""
    from ..model.shares import FLOW_QUEUEING_KINDS, Share, bottleneck_shares, regrown_rate

    spans = [(f.first_byte_at, f.receiver.last_byte_at or f.first_byte_at) for f in flows]
    cuts = sorted({t for span in spans for t in span} | {t for u in streams for t in (u.started_at, u.ended_at)})
    # How long the flows had to converge: the longest stretch of time two or more ran together (a short stretch as
    # one ends just before another does not make the whole run unconverged).
    together = max(
        (
            end - start
            for start, end in zip(cuts, cuts[1:])
            if sum(first <= start and end <= last for first, last in spans) >= 2
        ),
        default=0.0,
    )
    owed = [(0.0, 0.0)] * len(flows)  # per flow: (low, high) bits owed
    queue_s, aqm_s = _queue_delays(way)
    spent: list[dict] = [{} for _ in flows]  # per flow: {(why, flows): seconds spent with that set}
    reached: list[float | None] = [None] * len(flows)  # per flow: the low end's rate at the end of its last set
    for start, end in zip(cuts, cuts[1:]):
        running = [i for i, (first, last) in enumerate(spans) if first <= start and end <= last]
        if not running:
            continue
        # A stream takes its datagrams' wire rate (payload + UDP, IP and Ethernet headers), in TCP goodput's terms.
        udp = [
            u.spec.rate * (u.packet_size + 42) / u.packet_size * capacity / way.rate_bps
            for u in streams
            if u.started_at <= start and end <= u.ended_at
        ]
        found = bottleneck_shares(
            capacity,
            [contenders[i] for i in running],
            unresponsive=udp,
            what=what,
            fair_queue=way.queue.kind if way.queue is not None and way.queue.kind in FLOW_QUEUEING_KINDS else None,
            queue_s=queue_s,
            aqm_s=aqm_s,
            over_s=together,
        )
        if any(share.bps is None and not share.ranged for share in found):
            return [Share(None, found[0].why, len(flows))] * len(flows)
        for i, share in zip(running, found):
            low, high = (share.bps, share.bps) if share.bps is not None else (share.low_bps, share.high_bps)
            if reached[i] is not None:  # a flow already sending regrows its window; one just started is in slow start
                low, reached[i] = regrown_rate(reached[i], low, contenders[i].cc, contenders[i].rtt_s, end - start)
            else:
                reached[i] = low
            # The high end takes what it is left at once: the others' queue drains as they end, so a window they held
            # back sends faster at once, and an 8 s run's shares stray past the bracket's top (UML: a far reno flow at
            # 1.17 of it).
            owed[i] = (owed[i][0] + low * (end - start), owed[i][1] + high * (end - start))
            spent[i][(share.why, share.flows)] = spent[i].get((share.why, share.flows), 0.0) + end - start
    shares = []
    for i, (first, last) in enumerate(spans):
        if last <= first or not spent[i]:
            shares.append(None)
            continue
        why, n = max(spent[i], key=spent[i].get)  # the set it ran beside longest names its share
        if len(cuts) > 2:
            why += "; averaged over its time beside each set of flows"
        low, high = (owed[i][0] / (last - first), owed[i][1] / (last - first))
        shares.append(Share(low, why, n) if low == high else Share(None, why, n, low, high))
    return shares


def _queue_delays(way):
    """(the bottleneck queue's delay when full, the delay its AQM holds it near or None), in seconds at its rate."""
    from ..model import MTU_FRAME_BYTES

    aqm = way.queue.standing_bytes(way.rate_bps) if way.queue is not None else None
    full = way.queue_limit_packets() * MTU_FRAME_BYTES * 8 / way.rate_bps
    return full, (None if aqm is None else aqm * 8 / way.rate_bps)
