"""A workload adapter written by a user (issue 32): Pair.run and Topology.run measure it as the plugin's own."""

import json
import subprocess
import sys
import textwrap
import time

import pytest

from pytest_tcpnet import FlowOutcome, LabError, Link, Workload, WorkloadRun, assert_throughput_within, netlink

PORT = 7070

#: The user's service: answers each connection with `nbytes` bytes, then closes it.
SERVER = textwrap.dedent(
    """
    import socket, sys
    address, port, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    listener = socket.create_server((address, port))
    conn, _ = listener.accept()
    chunk = b"x" * 65536
    left = nbytes
    while left:
        left -= conn.send(chunk[:left])
    conn.close()
    """
)

#: The user's client: reads to the end and prints what it saw (times on the monotonic clock every namespace shares).
CLIENT = textwrap.dedent(
    """
    import json, socket, sys, time
    started = time.monotonic()
    sock = socket.create_connection((sys.argv[1], int(sys.argv[2])))
    connected = time.monotonic()
    got, first = 0, None
    while data := sock.recv(65536):
        first = first or time.monotonic()
        got += len(data)
    print(json.dumps({"nbytes": got, "local": sock.getsockname(), "remote": sock.getpeername(),
                      "connected_at": connected, "first_byte_at": first, "last_byte_at": time.monotonic()}))
    """
)


class UserDownload(Workload):
    """What a user writes once to measure their own service: start it, wait for it, say what each end did."""

    kind = "user-download"

    def __init__(self, nbytes, *, client=CLIENT, own_results=()):
        self.nbytes, self.client_code, self.own_results = nbytes, client, list(own_results)
        self.started = []

    def start(self, pair, deadline):
        server = pair.server.popen([sys.executable, "-c", SERVER, pair.server.address, str(PORT), str(self.nbytes)])
        self.started.append((pair.server, server))
        pair.server.wait_listening(PORT, timeout=max(0.1, deadline - time.monotonic()))
        client = pair.client.popen(
            [sys.executable, "-c", self.client_code, pair.server.address, str(PORT)], stdout=subprocess.PIPE, text=True
        )
        self.started.append((pair.client, client))

    def wait(self, deadline):
        _, client = self.started[-1]
        try:
            out, _ = client.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise LabError("the user's client did not finish before the deadline") from None
        seen = json.loads(out)
        receiver = dict(seen, local=tuple(seen["local"]), remote=tuple(seen["remote"]))
        sender = {"nbytes": self.nbytes, "local": receiver["remote"], "remote": receiver["local"]}
        return [FlowOutcome(sender=sender, receiver=receiver, sender_role="server", details={"service": "mine"})]

    def stop(self):
        for node, proc in self.started:
            node.stop(proc)

    def results(self, pair, flows):
        return self.own_results


def test_a_user_s_adapter_is_measured_as_the_plugin_s_own_workloads(tcpnet):
    """3 MB from the user's own server through a 20 Mbit/s link: the flow comes back with both ends' TCP_INFO
    sampled by sock_diag (the user reported only times and bytes), the model's prediction, the adapter's own
    details, and registered with the lab like any transfer; judged within 10% of the link's goodput (host htb
    measured 0.995-1.007 of the rate while a queue stood; the flow's own slow start costs under 2% here)."""
    pair = tcpnet.pair(Link(rate="20mbit"))
    run = pair.run(UserDownload(3_000_000), timeout=30)
    assert isinstance(run, WorkloadRun) and run.results == []
    (flow,) = run.flows
    assert flow.nbytes == 3_000_000 and flow.direction == "download" and flow.details == {"service": "mine"}
    assert flow.sender_tcp_info["bytes_acked"] >= 3_000_000, flow.describe()  # sampled: the user gave none
    assert flow.sender.buffers["sndbuf"] and flow.receiver.buffers["rcvbuf"], flow.describe()
    cc_key = "net.ipv4.tcp_congestion_control"
    assert flow.cc == pair.server.sysctls([cc_key])[cc_key], flow.describe()  # as sock_diag saw the socket use
    assert flow in tcpnet.results
    assert_throughput_within(flow, rel=0.10)


def test_bad_arguments_to_run_are_refused_before_anything_starts(tcpnet):
    pair = tcpnet.pair()
    with pytest.raises(TypeError, match="workload: expected an instance of a pytest_tcpnet.Workload subclass"):
        pair.run(object(), timeout=5)
    workload = UserDownload(1000)
    with pytest.raises(ValueError, match="timeout"):
        pair.run(workload, timeout=0)
    # Without a timeout the workload's own default_timeout(link) is the deadline; this one gives none.
    with pytest.raises(TypeError, match=r"timeout: UserDownload has no default_timeout\(link\)"):
        pair.run(workload)
    assert workload.started == [] and tcpnet.results == []


def test_the_plugin_s_adapters_check_their_options_when_built_and_run_with_their_own_deadline(tcpnet):
    """Pair's workload methods are sugar over run(workload): the adapters check their own options before anything
    starts (so a workload built for run() is checked as the method's is) and give their own deadline."""
    from pytest_tcpnet.model.app import Flow
    from pytest_tcpnet.workload import Bulk
    from pytest_tcpnet.workload.latency import UnderLoad
    from pytest_tcpnet.workload.requests import RequestResponse

    with pytest.raises(ValueError, match="count: must be a whole number of requests"):
        RequestResponse(0, response_size=100)
    with pytest.raises(ValueError, match="probe_interval: must be in"):
        UnderLoad(duration=1, probe_interval=20)
    with pytest.raises(TypeError, match="flows: expected a list of Flow"):
        Bulk([])
    with pytest.raises(TypeError, match="starve_receiver: must be True or False"):
        Bulk([Flow(nbytes=1000)], starve_receiver="yes")
    pair = tcpnet.pair()
    workload = RequestResponse(5, response_size=10_000)
    assert workload.default_timeout(pair.link) >= 60  # a minute at least, however small
    (exchanges,) = pair.run(workload).results
    assert len(exchanges.fct_s) == 5 and exchanges in tcpnet.results
    (flow,) = pair.run(Bulk([Flow(nbytes=200_000)])).flows
    assert flow.nbytes == 200_000 and not flow.starved_receiver


def test_an_outcome_s_records_become_typed_ends_at_the_boundary():
    """A FlowOutcome takes dict records in the workload's own terms: known keys become ConnectionEnd fields (addresses
    as tuples), the rest stay in `extra`, so nothing past the adapter reads a dict record."""
    from pytest_tcpnet.records import ConnectionEnd

    outcome = FlowOutcome(
        sender={"nbytes": 10, "local": ["198.19.0.2", 7070], "queries": 3},
        receiver=ConnectionEnd(nbytes=10),
        sender_role="server",
    )
    assert isinstance(outcome.sender, ConnectionEnd) and outcome.sender.local == ("198.19.0.2", 7070)
    assert outcome.sender.extra == {"queries": 3} and outcome.receiver.nbytes == 10


class Uncounted(UserDownload):
    """A user's adapter whose receiver forgets to say how many bytes it received."""

    def wait(self, deadline):
        (outcome,) = super().wait(deadline)
        return [FlowOutcome(outcome.sender, outcome.receiver.replace(nbytes=None), "server")]


def test_an_outcome_without_the_receiver_s_bytes_is_named(tcpnet):
    pair = tcpnet.pair()
    workload = Uncounted(100_000)
    with pytest.raises(ValueError, match=r"Uncounted: a FlowOutcome's receiver must say the payload bytes"):
        pair.run(workload, timeout=30)
    assert all(proc.poll() is not None for _, proc in workload.started) and tcpnet.results == []


def test_a_user_s_workload_that_hangs_is_stopped_at_its_deadline(tcpnet):
    pair = tcpnet.pair()
    hanging = "import time; time.sleep(600)"
    with pytest.raises(LabError, match="did not finish before the deadline"):
        pair.run(UserDownload(1000, client=hanging), timeout=1.5)
    assert [netlink.pids_in_namespace(node.namespace) for node in pair.nodes] == [[], [], []]


def test_a_result_of_a_kind_the_plugin_cannot_report_is_refused_with_the_contract(tcpnet):
    pair = tcpnet.pair()
    with pytest.raises(TypeError, match=r"UserDownload.results\(\): expected results of the kinds .*got dict"):
        pair.run(UserDownload(100_000, own_results=[{"p99": 1.0}]), timeout=30)


def test_a_topology_runs_a_user_s_workload_on_each_pair_at_once(tcpnet):
    """Two of the user's downloads through one 20 Mbit/s dumbbell bottleneck, in one measurement slot: each is
    measured on its own pair, each is owed its share of the bottleneck while the other ran, and the link's checks
    count the other flow as other traffic (its packets on the shaper), so neither reads the shared shaper as slow."""
    dumbbell = tcpnet.dumbbell(2, bottleneck=Link(rate="20mbit"))
    runs = dumbbell.run([UserDownload(2_000_000), UserDownload(2_000_000)], timeout=30)
    flows = [run.flows[0] for run in runs]
    assert [f.nbytes for f in flows] == [2_000_000, 2_000_000]
    assert all(f.sender_tcp_info["bytes_acked"] >= 2_000_000 for f in flows)
    assert all(f.share is not None and f.share.flows == 2 for f in flows), [f.describe() for f in flows]
    assert all(f.applied_rate is None and not f.impairment_mismatches for f in flows), [f.describe() for f in flows]
    idle, busy = dumbbell.run([None, UserDownload(100_000)], timeout=30)  # None: that pair stays idle
    assert idle is None and busy.flows[0].nbytes == 100_000
    with pytest.raises(ValueError, match="workloads: expected 2 entries"):
        dumbbell.run([UserDownload(1)], timeout=5)
    with pytest.raises(ValueError, match="every entry is None"):
        dumbbell.run([None, None], timeout=5)


@pytest.mark.tcpnet_needs("curl")
def test_curl_downloads_side_by_side_see_each_other_as_other_traffic(tcpnet):
    """The plugin's own adapters run the same way: two curl downloads at once through a 20 Mbit/s bottleneck, both
    connecting once the start gate opens. curl reports no TCP_INFO, so each flow's segments on the shaper come from
    the sampled socket (segs_out); without them the other download's packets went unseen and the shared shaper
    read 8.6 and 11.2 of 19.1 Mbit/s, 'not as configured'."""
    from pytest_tcpnet.workload.http import HttpDownload

    dumbbell = tcpnet.dumbbell(2, bottleneck=Link(rate="20mbit"))
    runs = dumbbell.run([HttpDownload(2_000_000), HttpDownload(2_000_000)], timeout=30)
    flows = [run.flows[0] for run in runs]
    assert all(f.sender_tcp_info.get("segs_out", 0) >= 2_000_000 // 1448 for f in flows), [f.describe() for f in flows]
    assert all(f.applied_rate is None and not f.impairment_mismatches for f in flows), [f.describe() for f in flows]
    # Each curl waited at the start gate (its process starts once it opens): none went before both had come.
    clients = [f.receiver.extra for f in flows]
    assert max(c["gated_at"] for c in clients) <= min(c["released_at"] for c in clients), clients
    assert all(f.receiver.connected_at >= c["released_at"] for f, c in zip(flows, clients)), clients
