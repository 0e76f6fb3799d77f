"""A measurement beside hypervisor steal is void and taken again, visibly (measure.run, --tcpnet-steal-retakes).

The hypervisor cannot be made to steal on demand, so these tests feed the steal counter (/proc/stat's, read by
hostload.host_steal_seconds) and run everything else for real: the workloads, the link changes, the registration.
What the counter reads on this machine is checked in tests/test_contention.py.
"""

import itertools
import re
from pathlib import Path

import pytest
from junitcases import junit_cases

import pytest_tcpnet
from pytest_tcpnet import Capture, Cbr, Flow, Lab, Link, Schedule, guest, hostload
from pytest_tcpnet.measure import run
from pytest_tcpnet.report.rows import result_row
from pytest_tcpnet.report.table import junit_properties, notes_cell
from pytest_tcpnet.results import TransferResult, UdpResult
from pytest_tcpnet.workload import Bulk

pytest_plugins = ["pytester"]


class StealCounter:
    """A steal counter that jumps by `jump` seconds at the reads listed in `jumps_at` (0-based) and stands still
    otherwise: each measurement reads it once before and once after, each wait for calm twice per window."""

    def __init__(self, jumps_at, jump=30.0):
        self.jumps_at, self.jump = set(jumps_at), jump
        self.reads = itertools.count()
        self.seconds = 1000.0

    def __call__(self):
        if next(self.reads) in self.jumps_at:
            self.seconds += self.jump
        return self.seconds


@pytest.fixture
def steal(monkeypatch):
    """Install a StealCounter: steal(jumps_at=...) -> the counter."""

    if guest.inside_vm():
        pytest.skip("in a guest the steal counter is the runner's (tests/test_contention.py checks it there)")

    def install(jumps_at, jump=30.0):
        counter = StealCounter(jumps_at, jump)
        monkeypatch.setattr(hostload, "host_steal_seconds", counter)
        return counter

    return install


@pytest.mark.tcpnet_needs("htb")
def test_a_take_beside_steal_is_void_and_taken_again_with_a_changing_link_and_a_udp_stream(tcpnet, steal):
    """The first take's steal counter jumps by 30 s (tens of CPUs over its span): it is void. The second take, after
    a quiet second, is kept: its flow carried every byte, the UDP stream is reported once, the lab holds the kept
    take's results only, the link stepped in the kept take and is back at its first rate after."""
    counter = steal(jumps_at=[1])  # read 0: take 1's before; read 1: its after
    pair = tcpnet.pair(link=Link(rate=Schedule([(0, "20mbit"), (0.5, "10mbit")])))
    run = pair.concurrent([Flow(nbytes=1_000_000), Cbr(rate="2mbit", duration=1)])
    (flow,) = [r for r in tcpnet.results if isinstance(r, TransferResult)]
    udp = [r for r in tcpnet.results if isinstance(r, UdpResult)]
    assert flow.nbytes == 1_000_000 and len(udp) == 1, tcpnet.results
    (void,) = flow.void_takes
    assert void.steal_cpus > 1 and void.seconds > 0 and 0.9 < void.waited_s < 3, void
    assert flow.host_steal_cpus == 0, flow.host_steal_cpus  # the kept take's: the counter stood still
    # One step per router end (both ways), the kept take's only: the void take's steps are not among them.
    assert [step["at"] for step in flow.link_changes] == [0.5, 0.5], flow.link_changes
    assert "retaken: 1 earlier take(s) void beside hypervisor steal" in flow.describe(), flow.describe()
    assert next(counter.reads) == 6, "two reads per take and two for the one quiet window between"
    settings = pair.world.read_back([(end, way.phases[0][1], way) for end, way in pair.world.changing_ends()])
    assert [s["rate_bps"] for s in settings.values()] == [20_000_000, 20_000_000], settings
    assert run.flows and run.flows[0] is flow
    # The stream is the kept take's and says so, as the flows do: the one registered is the one the run returned.
    assert run.udp == udp and udp[0].void_takes == flow.void_takes, udp
    assert "retaken: 1 earlier take(s)" in udp[0].describe() and "retaken" in run.describe(), run.describe()


@pytest.mark.tcpnet_needs("htb", "pfifo")
def test_a_void_take_s_drops_are_not_the_kept_take_s(tcpnet, steal):
    """12 Mbit/s of datagrams into a 10 Mbit/s link whose 100-packet FIFO drops the excess, taken twice (the first
    void): the stream's emulator_drops are the kept take's own, about the datagrams it lost, while the router's
    cumulative counter holds both takes' drops. Reading the counters around run() counts a void take's traffic (CI
    run 55); the result's own deltas do not."""
    steal(jumps_at=[1])
    pair = tcpnet.pair(Link(rate="10mbit", limit=100))
    (udp,) = pair.run(Bulk([Cbr("12mbit", duration=1)])).results
    cumulative = sum(max(q["drops"] for q in qdiscs) for qdiscs in pair.router_qdisc_stats().values())
    assert len(udp.void_takes) == 1, udp.describe()
    lost = udp.sent - udp.received
    # Lost at the queue only; the stream's three end markers go into the full queue too.
    assert lost > 100 and 0 <= udp.emulator_drops - lost <= 3, (udp.emulator_drops, lost, udp.describe())
    assert cumulative > 1.5 * udp.emulator_drops, (cumulative, udp.emulator_drops)
    row = result_row(udp)
    assert len(row["void_takes"]) == 1 and "retaken: void beside steal" in notes_cell(row), row


@pytest.mark.tcpnet_needs("tshark")
def test_a_capture_around_a_retaken_transfer_holds_each_take_s_connection(tcpnet, steal, tmp_path):
    """A Capture the test opened records the interface, so it holds the void take's connection beside the kept one's
    (a rootless CI run counted four FINs in one 2 MB transfer's capture); for_connection() keeps the kept take's."""
    steal(jumps_at=[1])
    pair = tcpnet.pair()
    with Capture(pair.server, directory=tmp_path) as cap:
        flow = pair.transfer(nbytes=500_000)
    assert len(flow.void_takes) == 1, flow.describe()
    streams = {p.stream for p in cap.result.packets}
    assert len(streams) == 2 and sum("F" in p.flags for p in cap.result.packets) == 4, cap.result.describe()
    own = cap.result.for_connection(flow.sender.local, flow.sender.remote)
    assert len({p.stream for p in own.packets}) == 1 and own.packets[0].flags == "S", own.describe()
    assert sum("F" in p.flags for p in own.packets) == 2 and own.data_bytes == 500_000, own.describe()
    assert own.packets[0].stream == max(streams)  # the kept take ran last


@pytest.mark.tcpnet_needs("htb")
def test_the_last_take_is_kept_whatever_its_steal_and_names_it(steal, monkeypatch):
    """Steal in every take and one retake allowed: two takes, the second kept, its description naming both the
    steal it ran beside and the void take before it; the wait for calm gives up after its most (10 s here)."""
    monkeypatch.setattr(run, "STEAL_CALM_MOST_S", 10.0)
    steal(jumps_at=range(0, 1000, 1), jump=0.5)  # every read: steal never calms
    with Lab(steal_retakes=1) as lab:
        flow = lab.pair(link=Link(rate="20mbit")).transfer(nbytes=300_000)
        assert len(lab.results) == 1
    assert len(flow.void_takes) == 1 and flow.host_steal_cpus > hostload.STEAL_VOID_CPUS, flow
    assert 9 <= flow.void_takes[0].waited_s <= 11, flow.void_takes  # most_s: 10 s of windows as long as the take
    text = flow.describe()
    assert "the hypervisor stole" in text and "retaken: 1 earlier take(s)" in text, text


@pytest.mark.tcpnet_needs("htb")
def test_no_retake_when_retakes_are_off_or_the_steal_is_below_the_bar(steal):
    """steal_retakes=0 keeps the first take beside any steal; with retakes on, a steal under STEAL_VOID_CPUS (one
    tick over a long take, counted low to none) keeps it too."""
    steal(jumps_at=[1])
    with Lab(steal_retakes=0) as lab:
        flow = lab.pair(link=Link(rate="20mbit")).transfer(nbytes=300_000)
    assert flow.void_takes == () and flow.host_steal_cpus > 1, flow
    steal(jumps_at=[1], jump=0.01)
    with Lab() as lab:
        flow = lab.pair(link=Link(rate="20mbit")).transfer(nbytes=300_000)
    assert flow.void_takes == (), flow.void_takes


@pytest.mark.tcpnet_needs("htb")
def test_a_seeded_lab_never_retakes(steal):
    """A seeded lab's netem would draw on from where the void take left its sequence: the first take is kept, its
    steal named, so a seed still means the same losses on every run."""
    steal(jumps_at=[1])
    with Lab(seed=7) as lab:
        flow = lab.pair(link=Link(rate="20mbit")).transfer(nbytes=300_000)
    assert flow.void_takes == () and flow.host_steal_cpus > 1, flow


def test_a_steal_reading_is_counted_low_by_one_tick():
    """One tick of steal over a 50 ms take may be a straddled increment, not a stall: counted as none; three ticks
    are at least two."""
    tick = 1 / __import__("os").sysconf("SC_CLK_TCK")
    before = {"steal_s": 10.0, "at": 0.0}
    assert hostload.surely_stolen_cpus(before, {"steal_s": 10.0 + tick, "at": 0.05}) == 0
    assert hostload.surely_stolen_cpus(before, {"steal_s": 10.0 + 3 * tick, "at": 0.05}) == pytest.approx(
        2 * tick / 0.05
    )
    assert hostload.surely_stolen_cpus(before, {"steal_s": None, "at": 1.0}) is None


def test_waiting_for_calm_on_this_machine_returns_after_a_window():
    """On the real counter: a quiet machine (or one whose steal is unreadable) returns after the first window."""
    waited = hostload.wait_for_steal_below(10.0, window_s=0.2, most_s=5)  # 10 CPUs: never reached on a real host
    assert 0.19 < waited < 1.0, waited


def test_void_takes_reach_the_row_the_table_and_junit():
    from pytest_tcpnet.results import VoidTake
    from pytest_tcpnet.workload.fake import fake_result

    result = fake_result(void_takes=(VoidTake(steal_cpus=0.45, seconds=2.0, waited_s=1.0),))
    row = result_row(result)
    assert row["void_takes"] == [{"steal_cpus": 0.45, "seconds": 2.0, "waited_s": 1.0}]
    assert "retaken: void beside steal 0.45 CPUs" in notes_cell(row)
    assert ("tcpnet.flow0.void_takes_steal_cpus", "0.45") in junit_properties([row])
    assert result_row(fake_result())["void_takes"] == []


STOLEN_PROJECT = """
import itertools
from pytest_tcpnet import Link, hostload

def test_stolen_once(tcpnet, monkeypatch):
    reads, seconds = itertools.count(), [1000.0]
    def counter():
        if next(reads) == 1:
            seconds[0] += 30
        return seconds[0]
    monkeypatch.setattr(hostload, "host_steal_seconds", counter)
    tcpnet.pair(link=Link(rate="20mbit")).transfer(nbytes=200_000)

def test_quiet(tcpnet, monkeypatch):
    monkeypatch.setattr(hostload, "host_steal_seconds", lambda: 1000.0)  # this machine's own may steal: not here
    tcpnet.pair(link=Link(rate="20mbit")).transfer(nbytes=200_000)
"""


@pytest.mark.tcpnet_needs("htb")
def test_the_session_lists_the_measurements_it_took_again(pytester, monkeypatch):
    """At the end of a session: which test's flows were taken again and the steal of each void take; the results
    file keeps them too; the quiet test is not listed."""
    monkeypatch.setenv("PYTHONPATH", str(Path(pytest_tcpnet.__file__).parents[1]))
    pytester.makepyfile(test_stolen=STOLEN_PROJECT)
    result = pytester.runpytest("-p", "no:cacheprovider", "--tcpnet-results=r.jsonl")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*tcpnet: 1 result(s) of 1 test(s) measured again: earlier takes void beside hypervisor steal*",
            "test_stolen.py::test_stolen_once result 0 (transfer): * CPUs stolen over * s; the kept take: 0.00",
        ]
    )
    assert "test_quiet result" not in result.stdout.str()
    from pytest_tcpnet.report import read_rows

    rows = {r["test"].split("::")[1]: r for r in read_rows([pytester.path / "r.jsonl"]) if r.get("flow") is not None}
    assert len(rows["test_stolen_once"]["void_takes"]) == 1 and rows["test_quiet"]["void_takes"] == [], rows


@pytest.mark.parametrize("option", ["--tcpnet-steal-retakes", "--tcpnet-steal-reruns"])
def test_steal_retakes_and_reruns_refuse_a_negative_count(pytester, option):
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", f"{option}=-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option}*must be a whole number of retries >= 0, got '-1'*"])


def test_a_lab_refuses_a_bad_retake_count():
    with pytest.raises(ValueError, match="steal_retakes"):
        Lab(steal_retakes=-1)


# A user's own program under pair.observe() cannot be taken again: a failed test whose flows ran beside steal is run
# again, as a whole (--tcpnet-steal-reruns). Each test feeds the steal counter on the attempts listed (every read
# jumps 30 s, so its observation reads tens of CPUs), runs a real upload between two processes of its own, and fails
# where a real verdict beside real steal would.
STOLEN_USER_PROJECT = """
import itertools, sys
import pytest
from pytest_tcpnet import Link, hostload

SERVER = (
    "import socket, sys\\n"
    "s = socket.create_server((sys.argv[1], 9000)); print('listening', flush=True); c, _ = s.accept()\\n"
    "while c.recv(65536): pass\\n"
)
CLIENT = "import socket, sys; c = socket.create_connection((sys.argv[1], 9000)); c.sendall(b'x' * 200_000); c.close()"
ATTEMPTS = {}


def attempt_beside_steal(request, monkeypatch, stolen, others_cpus=None):
    '''This test's attempt number; on the attempts in `stolen`, the steal counter jumps at every read.'''
    attempt = ATTEMPTS[request.node.name] = ATTEMPTS.get(request.node.name, 0) + 1
    seconds = itertools.count(1000, 30 if attempt in stolen else 0)
    monkeypatch.setattr(hostload, "host_steal_seconds", lambda: float(next(seconds)))
    if others_cpus is not None:
        monkeypatch.setattr(hostload, "others_cpus", lambda before, after: others_cpus)
    return attempt


def users_upload(tcpnet):
    pair = tcpnet.pair(link=Link(rate="20mbit"))
    server = pair.server.popen([sys.executable, "-c", SERVER, pair.server.address], stdout=-1, text=True)
    assert server.stdout.readline().strip() == "listening"
    with pair.observe() as seen:
        pair.client.run([sys.executable, "-c", CLIENT, pair.server.address], check=True, timeout=60)
    (flow,) = seen.flows
    return flow


def test_fails_once_beside_steal(tcpnet, request, monkeypatch):
    attempt = attempt_beside_steal(request, monkeypatch, stolen={1})
    flow = users_upload(tcpnet)
    assert flow.beside_steal is (attempt == 1), flow.describe()
    assert attempt > 1, "the verdict a stalled path fails"


def test_fails_beside_steal_every_time(tcpnet, request, monkeypatch):
    attempt_beside_steal(request, monkeypatch, stolen={1, 2, 3, 4})
    users_upload(tcpnet)
    assert False, "fails beside steal every time"


def test_fails_beside_load_alone(tcpnet, request, monkeypatch):
    attempt_beside_steal(request, monkeypatch, stolen=set(), others_cpus=1.5)
    users_upload(tcpnet)
    assert False, "fails beside other processes' load: a host's, never void"


def test_fails_before_measuring(tcpnet, request, monkeypatch):
    attempt_beside_steal(request, monkeypatch, stolen={1, 2, 3})
    assert False, "nothing measured: not run again"
"""


@pytest.mark.tcpnet_needs("htb")
@pytest.mark.parametrize("workers", [None, "2"])
def test_a_failed_test_whose_user_flows_ran_beside_steal_is_run_again_on_record(pytester, monkeypatch, workers):
    """By default (--tcpnet-steal-reruns=2): the test that failed beside steal once passes on its second attempt, and
    is not flaky; the one beside steal every time fails on its third, its report listing both void attempts; a failure
    beside load, or before anything was measured, is not run again. Every attempt is in the results file, JUnit and
    the table; the session lists the tests run again."""
    monkeypatch.setenv("PYTHONPATH", str(Path(pytest_tcpnet.__file__).parents[1]))
    pytester.makepyfile(test_user_steal=STOLEN_USER_PROJECT)
    xdist = ["-p", "xdist", "-n", workers] if workers else []
    result = pytester.runpytest(
        *xdist, "-p", "no:cacheprovider", "--junitxml=junit.xml", "--tcpnet-results=r.jsonl", "--tcpnet-strict=all"
    )
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*tcpnet void attempts (hypervisor steal)*",
            "attempt 1: *fails beside steal every time* ?void: 1 flow(s) measured while the hypervisor stole up to *"
            " CPUs; the next attempt waited * s for the steal to calm]",
            "attempt 2: *fails beside steal every time* ?void: *",
        ]
    )
    result.stdout.fnmatch_lines(
        ["*tcpnet: 2 test(s) run again: failed attempts void beside hypervisor steal (--tcpnet-steal-reruns)*"]
    )
    result.stdout.fnmatch_lines(
        [
            "test_user_steal.py::test_fails_beside_steal_every_time: failed on attempt 3",
            "  attempt 1: *?void: *",
            "  attempt 2: *?void: *",
        ]
    )
    result.stdout.fnmatch_lines(
        ["test_user_steal.py::test_fails_once_beside_steal: passed on attempt 2", "  attempt 1: *?void: *"]
    )
    assert "flaky" not in out  # a void attempt is no evidence against the test: --tcpnet-strict=all does not fail it
    assert "processes outside the session kept up to 1.5 CPUs busy" in out  # the load is named; that test ran once
    from pytest_tcpnet.report import read_rows

    rows = read_rows([pytester.path / "r.jsonl"])
    attempts = sorted(
        (r["test"].split("::")[1], r["attempt"], r["outcome"], r.get("void_attempt", False))
        for r in rows
        if r.get("flow") is not None
    )
    assert attempts == [
        ("test_fails_beside_load_alone", 1, "failed", False),
        ("test_fails_beside_steal_every_time", 1, "failed", True),
        ("test_fails_beside_steal_every_time", 2, "failed", True),
        ("test_fails_beside_steal_every_time", 3, "failed", False),
        ("test_fails_once_beside_steal", 1, "failed", True),
        ("test_fails_once_beside_steal", 2, "passed", False),
    ], attempts
    table = out.split("measured flow(s)")[1]
    assert re.search(r"^test_user_steal.py::test_fails_once_beside_steal +failed +1 void ", table, re.M), table
    cases = junit_cases(pytester.path / "junit.xml")
    once = cases["test_fails_once_beside_steal"]
    assert once["tcpnet.attempts"] == "2" and float(once["tcpnet.attempt1.void_steal_cpus"]) > 1, once
    assert "tcpnet.attempt1.flow0.measured_bps" in once and "tcpnet.flow0.measured_bps" in once, once
    assert cases["test_fails_beside_steal_every_time"]["tcpnet.attempts"] == "3"
    assert "tcpnet.attempts" not in cases["test_fails_beside_load_alone"]
    assert "tcpnet.attempts" not in cases["test_fails_before_measuring"]


@pytest.mark.tcpnet_needs("htb")
def test_steal_reruns_off_runs_each_test_once(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(pytest_tcpnet.__file__).parents[1]))
    pytester.makepyfile(test_user_steal=STOLEN_USER_PROJECT)
    result = pytester.runpytest("-p", "no:cacheprovider", "--tcpnet-steal-reruns=0", "-k", "once or every_time")
    result.assert_outcomes(failed=2)
    assert "run again" not in result.stdout.str() and "void attempts" not in result.stdout.str()
