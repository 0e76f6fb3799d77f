"""A workload that runs nothing: it returns records it was given, to show the contract and to test what consumes results.

Like httpx's MockTransport: the code under test (assertions, reports, plots, the measurement
layer) sees real TransferResult objects, while the traffic is made up. Never use it to test
a claim about TCP.
"""

from ..model import Host, Link
from ..results import TransferResult
from .base import FlowOutcome, Workload

__all__ = ["FakeWorkload", "fake_records", "fake_result"]


def fake_records(
    *,
    nbytes,
    duration_s,
    start=100.0,
    sender_tcp_info=None,
    sender_buffers=None,
    receiver_buffers=None,
    checkpoints=None,
):
    """(sender, receiver) records of a flow that moved nbytes evenly in duration_s seconds from `start`."""
    end = start + duration_s
    receiver = {
        "nbytes": nbytes,
        "connected_at": start,
        "first_byte_at": start,
        "first_read": 0,
        "last_byte_at": end,
        "checkpoints": checkpoints or [(start, 0), (end, nbytes)],
        "buffers": {"rcvbuf": 131072, "sndbuf": 16384, "cc": "cubic", **(receiver_buffers or {})},
        "tcp_info": {},
        "pauses": [],
    }
    sender = {
        "nbytes": nbytes,
        "connected_at": start,
        "first_write_at": start,
        "written_at": end,
        "acked_at": end,
        "buffers": {"sndbuf": 16384, "rcvbuf": 131072, "cc": "cubic", **(sender_buffers or {})},
        "tcp_info": dict(sender_tcp_info or {}),
        "pauses": [],
    }
    return sender, receiver


def fake_result(
    *,
    nbytes=10_000_000,
    duration_s=1.0,
    link=None,
    client=None,
    server=None,
    kernel="6.18.0",
    sysctls=None,
    sender_tcp_info=None,
    sender_buffers=None,
    receiver_buffers=None,
    checkpoints=None,
    **fields,
):
    """A TransferResult for unit tests of what consumes results (no lab, no privileges)."""
    sender, receiver = fake_records(
        nbytes=nbytes,
        duration_s=duration_s,
        sender_tcp_info=sender_tcp_info,
        sender_buffers=sender_buffers,
        receiver_buffers=receiver_buffers,
        checkpoints=checkpoints,
    )
    return TransferResult(
        nbytes=nbytes,
        direction=fields.pop("direction", "download"),
        kernel=kernel,
        link=link or Link(),
        client=client or Host(),
        server=server or Host(),
        sysctls=sysctls or {"client": {}, "server": {}},
        sender=sender,
        receiver=receiver,
        workload=fields.pop("workload", "fake"),
        **fields,
    )


class FakeWorkload(Workload):
    """Returns the FlowOutcomes that `outcomes(pair)` makes, without starting anything."""

    kind = "fake"
    sampled = False

    def __init__(self, outcomes):
        self._outcomes = outcomes
        self._pair = None
        self.started = self.stopped = False

    def start(self, pair, deadline):
        self._pair, self.started = pair, True

    def wait(self, deadline):
        return [o if isinstance(o, FlowOutcome) else FlowOutcome(*o) for o in self._outcomes(self._pair)]

    def stop(self):
        self.stopped = True
