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
        # A measurement's sampler names each thread by the namespace it reads (one thread per namespace, however
        # many pairs share it).
        if role == pair.client.namespace and not collected and time.monotonic() - started[0] > 0.5:
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


def test_a_shared_sampler_s_view_names_each_namespace_by_the_pair_s_role():
    """A measurement's sampler keys its rows by namespace; each pair sees its two ends as client and server, and
    nothing of a namespace that is not one of its ends (a star's other servers)."""
    client, server, other = ("198.18.0.2", 40000), ("198.19.0.2", 9000), ("198.19.1.2", 9000)
    rows = {
        ("ns-client", client, server): [(1.0, "c")],
        ("ns-client", client, other): [(1.0, "c2")],
        ("ns-server0", server, client): [(1.0, "s")],
        ("ns-server1", other, client): [(1.0, "s2")],
    }
    samples = sampler.SocketSamples(
        rows,
        0.01,
        ccs={("ns-server0", server, client): "reno"},
        closed={("ns-server1", other, client): (2.0, 1.9, {})},
        packets={"ns-server0": ({}, {}), "ns-server1": ({}, {})},
    )
    view = samples.relabelled({"client": "ns-client", "server": "ns-server0"})
    assert set(view.rows) == {("client", client, server), ("client", client, other), ("server", server, client)}
    assert view.cc_of(("server", server, client)) == "reno" and view.closed == {}
    assert view.opened_and_closed("server", server, client) == (None, None) and view.interval == 0.01


def test_a_sampler_behind_its_schedule_still_reads_each_socket_s_destruction_as_it_comes(tcpnet):
    """A sampler whose samples take longer than its interval (a busy host) went from one sample to the next without
    reading the kernel's destruction messages between them: a socket that closed mid-run vanished from the samples at
    once, and its final row was read (and timed) only when the sampler stopped. In a star's shared client (fresh-clone
    CI run 17, beside a CPU hog) the three flows then kept 140, 108 and 89 rows in the window all three were open."""
    pair = tcpnet.pair()
    namespaces = {"client": pair.client.namespace, "server": pair.server.namespace}
    # An interval no sample can keep: every wait starts past its deadline, as a starved sampler's do.
    watching = sampler.SocketSampler(namespaces, 1e-6, cpu_budget=None, families=pair.world.socket_families).start()
    try:
        result = pair.transfer(200_000)
        closed_by = time.monotonic()
        time.sleep(0.5)  # the sampler goes on sampling; the socket is gone
    finally:
        stopped_at = time.monotonic()
        samples = watching.stop()
    key = ("client", tuple(result.receiver.local), tuple(result.receiver.remote))
    assert key in samples.closed, sorted(samples.closed)
    read_at = samples.closed[key][0]
    # Read while sampling went on (within the half second after the transfer returned), not at the stop.
    assert read_at < stopped_at and read_at <= closed_by + 0.25, (read_at - closed_by, stopped_at - closed_by)
    assert samples.rows[key][-1][0] == read_at
