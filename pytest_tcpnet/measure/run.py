"""Run any workload on a pair and measure it: slot, counters before/after, socket sampling, capture, results."""

import time

from ..results import TransferResult
from .observe import TCP_SYSCTLS, PathCounters
from .sampler import SocketSampler, default_interval
from .slots import measurement_slot, slot_wait_s

__all__ = ["run_workload", "TCP_SYSCTLS"]

def run_workload(pair, workload, *, timeout, sample_interval=None, capture=False, artifact_dir=None, conditions=None):
    """Run `workload` on `pair` inside a measurement slot; return one TransferResult per flow.

    sample_interval: seconds between socket samples (None: fit to the RTT; 0 or False: off).
    capture: False, True (the sender's side), or a node role ("client", "router", "server").
    conditions: extra TransferResult fields shared by every flow (reader, writer, starved_receiver, ...).
    """
    if sample_interval is None:
        sample_interval = default_interval(pair.link.rtt_s)
    # Waiting for a slot is queueing behind other sessions' transfers, not this transfer's time:
    # its deadline starts once the slot is held.
    with measurement_slot(slot_wait_s(), hold_s=timeout):
        deadline = time.monotonic() + timeout
        counters = PathCounters(pair)
        sampler = None
        if sample_interval and workload.sampled:
            sampler = SocketSampler({"client": pair.client.namespace, "server": pair.server.namespace},
                                    sample_interval).start()
        capturer = _start_capture(pair, workload, capture, artifact_dir) if capture else None
        samples = capture_result = None
        try:
            workload.start(pair, deadline)
            outcomes = workload.wait(deadline)
        finally:
            workload.stop()
            if sampler is not None:
                samples = sampler.stop()
            if capturer is not None:
                capture_result = capturer.stop()
        counters.stop()
    shared = dict(counters.conditions(), workload=workload.kind, samples=samples, capture=capture_result,
                  artifact_dir=artifact_dir, **(conditions or {}))
    results = []
    for outcome in outcomes:
        if samples is not None:
            _complete_from_samples(outcome, samples)
        spec = outcome.spec
        results.append(TransferResult(
            nbytes=outcome.receiver["nbytes"],
            direction="download" if outcome.sender_role == "server" else "upload",
            sndbuf_requested=getattr(spec, "sndbuf", None), rcvbuf_requested=getattr(spec, "rcvbuf", None),
            reader=getattr(spec, "reader", None), writer=getattr(spec, "writer", None),
            write_size=getattr(spec, "write_size", None),
            sender=outcome.sender, receiver=outcome.receiver, sender_role=outcome.sender_role,
            reported_bps=outcome.reported_bps, details=outcome.details, **shared))
    return results


def _complete_from_samples(outcome, samples):
    """Fill in what a tool did not report itself (iperf3, curl) from the last sample of each end's socket."""
    from .sampler import SERIES_FIELDS

    receiver_role = "client" if outcome.sender_role == "server" else "server"
    for record, role in ((outcome.sender, outcome.sender_role), (outcome.receiver, receiver_role)):
        if "local" not in record:
            continue
        rows = samples.rows.get((role, tuple(record["local"]), tuple(record["remote"])))
        if not rows:
            continue
        last = dict(zip(SERIES_FIELDS, rows[-1][1]))
        info = record.setdefault("tcp_info", {})
        for key, value in last.items():
            if value is not None and key not in ("rmem_alloc", "rcvbuf", "wmem_alloc", "sndbuf", "fwd_alloc",
                                                 "wmem_queued", "optmem", "backlog", "drops"):
                info.setdefault(key, value)
        buffers = record.setdefault("buffers", {})
        first = dict(zip(SERIES_FIELDS, rows[0][1]))
        record.setdefault("buffers_at_connect", {"sndbuf": first["sndbuf"], "rcvbuf": first["rcvbuf"]})
        buffers.setdefault("sndbuf", last["sndbuf"])
        buffers.setdefault("rcvbuf", last["rcvbuf"])


def _start_capture(pair, workload, where, artifact_dir):
    """A capture on the sender's side of the path (where window-full analysis is meaningful) or on `where`."""
    from ..capture import Capture

    if where is True:
        flows = getattr(workload, "flows", None) or [None]
        download = getattr(flows[0], "direction", "download") == "download"
        where = "server" if download else "client"
    if where not in ("client", "router", "server"):
        raise ValueError(f"capture: must be True, False or a node role 'client', 'router', 'server', got {where!r}")
    node = getattr(pair, where)
    filter_ = f"tcp and host {pair.client.address} and host {pair.server.address}"
    capture = Capture(node, filter=filter_, directory=artifact_dir)
    capture.start()
    return capture
