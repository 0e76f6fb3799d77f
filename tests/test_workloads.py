"""Workloads against the real kernel: bulk flows with every knob, paced and pausing ends, a starved receiver,
concurrent flows, iperf3, HTTP + curl, and the measurements every result carries."""

import contextlib
import os
import signal
import time

import pytest
from slotholder import slot_held_elsewhere

from pytest_tcpnet import Flow, LabError, Link, MissingCapability, Pace, Pause, model, netlink
from pytest_tcpnet.assertions.verdicts import judge_trials
from pytest_tcpnet.results import jain_index
from pytest_tcpnet.workload.spawn import zygote_pid

pytestmark = pytest.mark.tcpnet_needs("privilege")


def _ours(pair):
    return [pid for node in pair.nodes for pid in netlink.pids_in_namespace(node.namespace)]


def test_bulk_flow_measures_goodput_series_and_conditions(tcpnet):
    pair = tcpnet.pair(link=Link(rate="50mbit"))
    result = pair.transfer(10_000_000)
    # 1448 payload bytes per 1514-byte frame at 50 Mbit/s = 47.8 Mbit/s; measured 47.8 (two runs).
    assert result.throughput_bps == pytest.approx(50e6 * 1448 / 1514, rel=0.05), result.describe()
    rates = [bps for _, bps in result.rate_series(0.2)]
    assert len(rates) >= 7 and all(0.8 * 50e6 < bps < 1.05 * 50e6 for bps in rates[1:-1]), rates
    cwnd = result.series("snd_cwnd")
    # Sampled from the start to the end. How often is the sampler's CPU budget's call (a quarter of a CPU for all
    # its threads): 10 ms apart where a sample is cheap, 36 ms on a slower machine (46 samples over 1.67 s in
    # fresh-clone CI run ci47), so the count is not judged to the 10 ms.
    assert len(cwnd) >= 20 and cwnd[0][0] < 0.05, cwnd[:3]
    assert cwnd[-1][0] >= 0.9 * result.duration_s, (cwnd[-3:], result.duration_s)
    acked = [v for _, v in result.series("bytes_acked")]
    assert acked == sorted(acked) and acked[-1] >= 9_000_000
    received = [v for _, v in result.series("bytes_received", side="receiver")]
    assert received[-1] >= 9_000_000
    assert result.limited_by == "cwnd"  # neither window nor buffer: the htb queue paces the flow
    assert result in tcpnet.results
    assert result.sysctls["client"]["net.ipv4.tcp_rmem"] and result.kernel == os.uname().release


def test_duration_mode_sends_for_the_time_asked(tcpnet):
    result = tcpnet.pair(link=Link(rate="20mbit")).transfer(duration=1.0)
    # The sender writes for 1 s (as iperf3 -t); what its buffer and the htb queue hold arrives after.
    assert result.sender.written_at - result.sender.first_write_at == pytest.approx(1.0, abs=0.1)
    assert result.nbytes == result.sender.nbytes
    assert result.throughput_bps == pytest.approx(20e6 * 1448 / 1514, rel=0.05)


def test_a_paced_reader_reads_at_its_own_rate(tcpnet):
    """C4's reader: 1 KB a hundred times a second converges to ~100 KiB/s whatever the link can do."""
    result = tcpnet.pair().transfer(300_000, reader=Pace(chunk=1024, per_second=100))
    # Measured 99.99 KiB/s: the reader's clock, not the network, sets the rate.
    assert result.throughput_bps / 8 == pytest.approx(1024 * 100, rel=0.05)
    assert "1.024 kB x 100/s" in result.describe()


def test_concurrent_flows_fill_a_rate_limited_link_together(tcpnet):
    pair = tcpnet.pair(link=Link(rate="50mbit"))
    both = pair.concurrent([Flow(duration=2.0, cc="reno"), Flow(duration=2.0, cc="reno")])
    assert len(both.flows) == 2 and len({f.sender.local for f in both.flows}) == 2
    assert all(f.cc == "reno" and f.nbytes > 0 for f in both.flows)
    assert 0.85 * 50e6 <= both.total_bps <= 50e6, both.describe()
    # No fairness claim here: with no base RTT the 1000-packet htb queue is the whole RTT and one
    # flow can hold most of it (measured Jain 0.67). Fairness needs a real RTT: the netem test below.


@pytest.mark.tcpnet_needs("netem")
def test_two_cubic_flows_share_50mbit_20ms_fairly(tcpnet):
    # Judged on the steady state, seconds 3-8 of 8 s flows, on a queue of about one BDP (83
    # packets). Whole-flow averages in the VM were not a sound verdict: htb's default 1000 packets
    # (240 ms of queue) split the flows 31 : 9 Mbit/s over 4 s; 100 packets gave Jain 0.96 but 80%
    # of the rate (start-up included); 200 packets 84% but Jain 0.78.
    # What the emulated link delivers under software emulation depends on the host's load: one
    # cubic flow alone got 40.9, 38.0, 27.7 Mbit/s steady in three loaded runs (load average 3.7 on
    # 2 cores) against 42.3 quiet; the pair then got 1.02, 0.72 and 0.93 of the single flow, with
    # Jain 0.996-1.0. So "the two fill the link" is judged against one flow measured just before on
    # the same path, a majority of up to three trials deciding (one load spike cannot fail it).
    pair = tcpnet.pair(link=Link(rate="50mbit", rtt="20ms", limit=100))

    def trial():
        alone = pair.concurrent([Flow(duration=8.0, cc="cubic")]).rates_between(3.0, 8.0)[0]
        return alone, pair.concurrent([Flow(duration=8.0, cc="cubic"), Flow(duration=8.0, cc="cubic")])

    def fair_and_full(outcome):
        alone, both = outcome
        steady = both.rates_between(3.0, 8.0)
        return jain_index(steady) >= 0.9 and sum(steady) >= 0.85 * alone

    passed, outcomes, verdicts = judge_trials(trial, fair_and_full, trials=3)
    report = "\n".join(
        f"trial {i + 1} ({'ok' if ok else 'failed'}): one flow alone {alone / 1e6:.1f} Mbit/s; "
        f"two flows {[round(r / 1e6, 1) for r in both.rates_between(3.0, 8.0)]} Mbit/s, "
        f"Jain {jain_index(both.rates_between(3.0, 8.0)):.3f}"
        for i, ((alone, both), ok) in enumerate(zip(outcomes, verdicts))
    )
    assert passed, report
    # And the link really is the bottleneck: at most its goodput (1448 of every 1514 bytes).
    assert all(sum(both.rates_between(3.0, 8.0)) <= model.link_goodput(50e6) * 1.01 for _, both in outcomes), report


def test_a_flow_can_start_later_than_another(tcpnet):
    """A flow asked to start 0.5 s after another sends its first byte 0.5 s after the other's: both wait at the
    measurement's start gate, the later one then sleeps its delay (on the host; under UML 0.58 s, its connection and
    one CPU shared with the first flow)."""
    pair = tcpnet.pair(link=Link(rate="20mbit"))
    late = pair.concurrent([Flow(nbytes=2_000_000), Flow(nbytes=200_000, start=0.5)])
    first, second = late.flows
    assert second.first_byte_at - first.first_byte_at == pytest.approx(0.5, abs=0.15)


def test_a_hung_peer_hits_the_deadline_and_is_stopped(tcpnet, tmp_path, monkeypatch):
    # Slots of this test's own: under -n 2 the other worker's 48 s curl test held the machine's slot,
    # and the queueing (not the transfer's own deadline) took this test past 15 s (a fresh-clone CI run).
    monkeypatch.setenv("TCPNET_LOCK_DIR", str(tmp_path / "locks"))
    pair = tcpnet.pair()
    started = time.monotonic()
    with pytest.raises(LabError, match="before the deadline"):
        pair.transfer(50_000_000, reader=Pause(after=1_000_000, seconds=300), timeout=2)
    assert time.monotonic() - started < 15
    assert _ours(pair) == []


def test_queueing_for_the_measurement_slot_is_not_the_transfers_time(tcpnet, tmp_path, monkeypatch):
    # Under -n 2 another worker's 20 s download once held the slot while this file's deadline test
    # waited: "no measurement slot free within 2 s". The timeout is the transfer's own.
    monkeypatch.setenv("TCPNET_LOCK_DIR", str(tmp_path / "locks"))  # slots of this test's own
    monkeypatch.setenv("TCPNET_MEASUREMENT_SLOTS", "1")
    pair = tcpnet.pair()
    with slot_held_elsewhere(hold_s=3.0):  # the slot frees after 3 s, beyond the 2 s timeout
        result = pair.transfer(100_000, timeout=2)
    assert result.nbytes == 100_000


def test_flows_start_from_a_preloaded_zygote_not_a_fresh_interpreter(tcpnet):
    pair = tcpnet.pair()
    pair.transfer(1000)
    zygote = zygote_pid()
    pair.transfer(1000)
    assert zygote_pid() == zygote  # one zygote per process, reused by every flow


@pytest.mark.tcpnet_needs("iperf3")
def test_iperf3_through_the_bindings_and_the_cli(tcpnet):
    from pytest_tcpnet.workload.iperf3 import bindings_available

    pair = tcpnet.pair(link=Link(rate="100mbit"))
    result = pair.iperf3(duration=2, cc="reno")
    # Measured 91.6 Mbit/s (htb 100 Mbit/s; iperf3 counts payload).
    assert result.throughput_bps == pytest.approx(100e6 * 1448 / 1514, rel=0.08), result.describe()
    assert result.workload == "iperf3" and result.cc == "reno" and result.retransmits is not None
    intervals = result.details["intervals"]
    assert len(intervals) == 2 and all(row["snd_cwnd"] for row in intervals)
    assert result.series("snd_cwnd")  # sampled from outside like any other flow
    assert bindings_available()
    from pytest_tcpnet.workload.iperf3 import Iperf3

    (cli,) = pair.run(Iperf3(duration=1, use_bindings=False), timeout=60).flows
    assert cli.throughput_bps == pytest.approx(100e6 * 1448 / 1514, rel=0.1)


def _children_of(pid):
    """The pids whose parent is pid (from /proc)."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:  # the field after the state: the parent
                    found.append(int(entry))
        except OSError:
            pass  # gone meanwhile
    return found


@pytest.mark.tcpnet_needs("iperf3")
def test_a_stopped_iperf3_command_line_child_takes_its_iperf3_with_it(tcpnet):
    """`iperf3 -J` (where the bindings cannot load) runs as a program of a forked child, and a workload stopped on a
    failure signals that child alone: an `iperf3 -s -1` whose client never came listened on past the lab's
    teardown. It now dies with the child."""
    from pytest_tcpnet.workload.flows import gated_program
    from pytest_tcpnet.workload.spawn import NamespaceChild

    pair = tcpnet.pair()
    argv = ["iperf3", "-s", "-1", "-J", "-B", pair.server.address, "-p", "5201"]
    child = NamespaceChild(pair.server.processes.netns_path, gated_program, dict(argv=argv), name="iperf3 -s")
    programs = []
    try:
        pair.server.wait_listening(5201, timeout=30)
        programs = _children_of(child.pid)
        assert len(programs) == 1, programs
        child.stop()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and os.path.exists(f"/proc/{programs[0]}"):
            time.sleep(0.01)
        assert not os.path.exists(f"/proc/{programs[0]}"), "iperf3 -s outlived the child that ran it"
        assert 5201 not in netlink.listening_ports(pair.server.namespace)
    finally:
        child.stop()
        for pid in programs:  # this test started it: it does not outlive the test, whatever the verdict
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.tcpnet_needs("curl")
def test_http_download_with_curl(tcpnet):
    pair = tcpnet.pair(link=Link(rate="50mbit"))
    result = pair.http_download(5_000_000)
    assert result.workload == "http" and result.nbytes == 5_000_000
    assert result.throughput_bps == pytest.approx(50e6 * 1448 / 1514, rel=0.1), result.describe()
    assert result.details["curl"]["http_code"] == 200
    assert len(result.rate_series(0.1)) >= 5  # from the client socket's sampled bytes_received


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda p: p.transfer(), ValueError, ["exactly one", "nbytes", "duration"]),
        (lambda p: p.transfer(1000, duration=1), ValueError, ["exactly one"]),
        (lambda p: p.transfer(1000, reader=Pace(per_second=10), writer="fast"), TypeError, ["writer", "Pace"]),
        (lambda p: p.transfer(1000, reader=Pause(after=5000, seconds=1)), ValueError, ["Pause", "before the end"]),
        (lambda p: p.transfer(1000, capture="everywhere"), ValueError, ["capture"]),
        (lambda p: p.transfer(1000, sample_interval=-1), ValueError, ["sample_interval"]),
        (lambda p: p.transfer(1000, starve_receiver="yes"), TypeError, ["starve_receiver"]),
        (lambda p: p.iperf3(duration=1.5), ValueError, ["whole seconds"]),
        (lambda p: p.iperf3(duration=1, parallel=0), ValueError, ["parallel"]),
        (lambda p: p.http_download(1000, limit_rate="fast"), ValueError, ["limit_rate", "200k"]),
        (lambda p: p.concurrent([]), TypeError, ["Flow"]),
    ],
)
def test_bad_workload_options_are_refused_before_anything_starts(tcpnet, call, error, words):
    pair = tcpnet.pair()
    with pytest.raises(error) as info:
        call(pair)
    for word in words:
        assert word in str(info.value)
    assert _ours(pair) == [] and tcpnet.results == []


def test_a_missing_tool_is_a_missing_capability(tcpnet, monkeypatch, tmp_path):
    pair = tcpnet.pair()
    monkeypatch.setenv("PATH", str(tmp_path))  # neither curl nor iperf3 on it
    with pytest.raises(MissingCapability, match="curl"):
        pair.http_download(1000)
    with pytest.raises(MissingCapability, match="iperf3"):
        pair.iperf3(duration=1)
    assert _ours(pair) == []
