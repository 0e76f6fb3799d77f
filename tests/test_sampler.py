"""The socket sampler's schedule on real transfers: its CPU budget counts sampling, not what the process does beside it."""

import gc
import time

import pytest

from pytest_tcpnet import Link
from pytest_tcpnet.measure import sampler

pytestmark = pytest.mark.tcpnet_needs("privilege")


def test_a_garbage_collection_in_a_sampler_thread_does_not_end_its_series(tcpnet, monkeypatch):
    """A full collection a sampler thread sets off is the process's CPU, not sampling's: billed to the
    receiver's thread (~0.25 s in a long session), it pushed the next sample past the transfer's end and
    the receiver's series stopped at 5.9 of 10 MB (fresh-clone CI run ci41)."""
    heap = [[i] for i in range(300_000)]  # a long session's heap: something for a full collection to walk
    pair = tcpnet.pair(link=Link(rate="50mbit"))
    record, started, collected = sampler.SocketSampler._record, [], []

    def record_then_collect(self, role, table):
        started.append(started[0] if started else time.monotonic())
        if role == "client" and not collected and time.monotonic() - started[0] > 0.5:
            cpu = time.thread_time()
            while time.thread_time() - cpu < 0.25:  # as much CPU as the collection seen in CI
                gc.collect()
            collected.append(time.thread_time() - cpu)
        return record(self, role, table)

    monkeypatch.setattr(sampler.SocketSampler, "_record", record_then_collect)
    result = pair.transfer(10_000_000)  # a download: the client's sampler thread is the receiver's
    assert collected and len(heap) == 300_000
    received = result.series("bytes_received", side="receiver")
    acked = result.series("bytes_acked")
    # Without the gc callback: the last receiver sample at 0.91 s and 5.5 MB of a 1.67 s transfer.
    assert received[-1][1] >= 9_000_000, (received[-1], acked[-1])
    assert received[-1][0] == pytest.approx(acked[-1][0], abs=0.1), (received[-1], acked[-1])
    assert sampler._count_gc_cpu not in gc.callbacks  # only while a sampler runs
