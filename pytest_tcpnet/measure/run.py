"""Run workloads on pairs and measure them: slot, counters before/after, socket sampling, capture, results."""

import contextlib
import time
from typing import NamedTuple

from .. import hostload
from ..results import TransferResult, VoidTake
from .changes import LinkChanges
from .gate import StartGate
from .observe import TCP_SYSCTLS, Observation, first_value, last_tcp_info, sampled_values, share_sampling
from .slots import idle_poll_wanted, measuring

__all__ = ["run_workloads", "Measured", "TCP_SYSCTLS", "DEFAULT_STEAL_RETAKES"]


class Measured(NamedTuple):
    """One workload's part of a measurement: its flows' TransferResults (registered), and what every result of the
    kept take shares: the takes voided before it, the path's router qdisc counters over it (deltas), whether idle
    CPUs were kept polling."""

    flows: list
    void_takes: tuple
    qdiscs: dict
    cpus_polled: "bool | None"


#: How many times a measurement beside hypervisor steal is taken again before the last take is kept (Lab's default).
#: Two left a CI run on this VM host kind with 10 of its 519 flows still beside steal after their third take (run 50:
#: episodes of tens of seconds), where one take in 20-35 was void.
DEFAULT_STEAL_RETAKES = 4
#: Before a retake, a window as long as the void take (1-5 s) must read calm; at most this long is waited.
STEAL_CALM_MOST_S = 30.0


def run_workloads(
    jobs, *, timeout, sample_interval=None, capture=False, artifact_dir=None, steal_retakes=DEFAULT_STEAL_RETAKES
):
    """Run several (pair, workload) at once, each inside an Observation of its pair; a Measured each: its
    TransferResults, one per flow, registered with the lab, and what the kept take shares with its own results.

    The measurement is pair.observe()'s: the same slot, counters, sampler and capture point (the end that sent
    each flow's data, its own packets only); the flows come from what the workloads' programs reported, completed
    from the samples where a tool reports less. sample_interval: seconds between socket samples (None: fit to the
    RTT; 0 or False: off). capture: False, True (the sender's side), or a node role ("client", "router",
    "server"). Each workload's conditions() add TransferResult fields its flows share (starved_receiver, ...).

    One measurement slot covers them all; every pair's counters are read before the first
    workload starts and after the last one ends, so the workloads share one span of time.

    A take beside hypervisor steal (hostload.STEAL_VOID_CPUS or more, counted low) is void: its links ran slower
    than asked, whatever the verdict would have been. Once the steal calms it is taken again, up to steal_retakes
    times; the kept take's flows list the void ones (TransferResult.void_takes), and the last take is kept whatever
    its steal (its description names it). Every take is judged alike, so a retake cannot favour a verdict.
    """
    void_takes = []
    while True:
        observations, outcomes = _take(jobs, timeout=timeout, sample_interval=sample_interval, capture=capture)
        stolen, seconds = _most_stolen(observations)
        if stolen is None or stolen < hostload.STEAL_VOID_CPUS or len(void_takes) >= steal_retakes:
            break
        # A calm window as long as the take it replaces (1-5 s): a one-second lull inside an episode of tens of
        # seconds (run 50) let the next take into the same episode.
        with hostload.idle_cpus_polling(idle_poll_wanted([pair for pair, _ in jobs])) as polled:
            waited = hostload.wait_for_steal_below(
                hostload.STEAL_VOID_CPUS,
                window_s=min(max(1.0, seconds), 5.0),
                most_s=STEAL_CALM_MOST_S,
                spin=not polled,  # a spinning window beside another worker's measurement would be its load
            )
        void_takes.append(VoidTake(steal_cpus=stolen, seconds=seconds, waited_s=waited))
    for observation in observations:
        observation.shared["void_takes"] = tuple(void_takes)
    return [
        Measured(
            _results(observation, workload, pair_outcomes, artifact_dir),
            observation.shared["void_takes"],
            observation.shared["qdiscs"],
            observation.shared["cpus_polled"],
        )
        for observation, (_, workload), pair_outcomes in zip(observations, jobs, outcomes)
    ]


def _most_stolen(observations):
    """(the most steal any of a take's observations saw, counted low, over how many seconds); (None, None): unknown."""
    readings = [observation.steal_reading for observation in observations]
    readings = [reading for reading in readings if reading is not None]
    return max(readings) if readings else (None, None)


def _take(jobs, *, timeout, sample_interval, capture):
    """One take of the measurement: (the observations, each workload's FlowOutcomes)."""
    with contextlib.ExitStack() as stack:
        # Waiting for a slot is queueing behind other sessions' transfers, not this measurement's time.
        polled = stack.enter_context(measuring([pair for pair, _ in jobs], hold_s=timeout))
        observations = [
            Observation(
                pair,
                capture=capture,
                sample_interval=0 if sample_interval is False or not workload.sampled else sample_interval,
                hold_s=timeout,
                connections=False,
                take_slot=False,
                link_changes=False,
            )
            for pair, workload in jobs
        ]
        share_sampling(observations, stack)  # a star's shared client is read once per sample, not once per pair
        for observation in observations:
            observation.cpus_polled = polled
            stack.enter_context(observation)
        deadline = time.monotonic() + timeout  # from the slot on
        outcomes = []
        # A world's links change once for all of its pairs (a dumbbell's bottleneck is every pair's).
        changes = list({id(pair.world): LinkChanges(pair.world) for pair, _ in jobs}.values())
        gate = stack.enter_context(StartGate())
        try:
            for change in changes:  # before any data moves: a timer slow to start must not make t=0 late
                change.wait_ready()
            for pair, workload in jobs:
                workload.start_gate = gate.path
                workload.start(pair, deadline)
            # t=0 of a changing link: the workloads are connected and about to move data (not the slot, nor
            # the programs' start-up: a phase of 2 s must be 2 s of the flow's life).
            for change in changes:
                change.start()
            gate.open()  # every flow that waits at it moves data from now on, at once
            for _, workload in jobs:
                outcomes.append(workload.wait(deadline))
        finally:
            applied = {id(change.world): (change.stop(), change.origin) for change in changes}
            for _, workload in jobs:
                workload.stop()
                workload.start_gate = None
    for observation in observations:
        steps, origin = applied[id(observation.pair.world)]
        observation.shared.update(link_changes=steps, schedule_origin=origin if steps or origin else None)
    return observations, outcomes


def _results(observation, workload, outcomes, artifact_dir):
    samples = observation.samples
    shared = dict(
        observation.shared, workload=workload.kind, samples=samples, artifact_dir=artifact_dir, **workload.conditions()
    )
    results = []
    for outcome in outcomes:
        sender, receiver = outcome.sender, outcome.receiver
        if receiver.nbytes is None:
            raise ValueError(
                f"{type(workload).__name__}: a FlowOutcome's receiver must say the payload bytes it received (nbytes)"
            )
        if samples is not None:
            sender, receiver = (
                _completed(sender, outcome.sender_role, samples),
                _completed(receiver, outcome.receiver_role, samples),
            )
        spec = outcome.spec
        results.append(
            TransferResult(
                nbytes=receiver.nbytes,
                direction="download" if outcome.sender_role == "server" else "upload",
                sndbuf_requested=getattr(spec, "sndbuf", None),
                rcvbuf_requested=getattr(spec, "rcvbuf", None),
                reader=getattr(spec, "reader", None),
                writer=getattr(spec, "writer", None),
                write_size=getattr(spec, "write_size", None),
                sender=sender,
                receiver=receiver,
                sender_role=outcome.sender_role,
                capture=observation.capture_for(outcome.sender_role, sender.local, sender.remote),
                reported_bps=outcome.reported_bps,
                details=outcome.details,
                **shared,
            )
        )
    observation.register(results)
    return results


def _completed(end, role, samples):
    """An end with what its tool did not report itself (iperf3, curl) filled in from its sampled socket, as observe()
    reads it: TCP_INFO from the last sample that has the chrono counters, buffers from the first and last that show
    them, the congestion control sock_diag saw. What the tool did report is kept."""
    if end.local is None:
        return end
    key = (role, end.local, end.remote)
    rows = samples.rows.get(key)
    if not rows:
        return end
    values = sampled_values(rows)
    buffers = {"sndbuf": first_value(values[::-1], "sndbuf"), "rcvbuf": first_value(values[::-1], "rcvbuf")}
    buffers.update(end.buffers)
    cc = samples.cc_of(key)
    if cc and not buffers.get("cc"):
        buffers["cc"] = cc
    return end.replace(
        tcp_info={**last_tcp_info(values), **end.tcp_info},
        buffers=buffers,
        buffers_at_connect=end.buffers_at_connect
        or {"sndbuf": first_value(values, "sndbuf"), "rcvbuf": first_value(values, "rcvbuf")},
    )
