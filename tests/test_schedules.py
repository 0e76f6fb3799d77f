"""Links that change while a flow runs (issue 22): Schedule values, Mahimahi traces, steps applied in place and on
time, results per phase."""

import os
import subprocess
import sys
import time

import pytest

from pytest_tcpnet import Lab, Link, Pace, Schedule, assert_follows_schedule, model
from pytest_tcpnet.measure import changes as link_changes
from tests.refusals import assert_refused

STEPS = Schedule([(0, "40mbit"), (2, "10mbit"), (4, "40mbit")])


@pytest.mark.parametrize(
    "steps, error, words",
    [
        ([], ValueError, ["at least one step"]),
        ([(1, "10mbit")], ValueError, ["first step must be at t=0"]),
        ([(0, "10mbit"), (2, "5mbit"), (1, "8mbit")], ValueError, ["step 2", "increase"]),
        ([(0, "10mbit"), (-1, "5mbit")], ValueError, ["step 1", ">= 0"]),
        ([(0, "10mbit"), ("soon", "5mbit")], ValueError, ["step 1"]),
        ([(0, None)], ValueError, ["step 0", "value"]),
        ("40mbit", TypeError, ["list of (time, value) steps"]),
        ([(0, "10mbit", "extra")], TypeError, ["step 0", "(time, value) pair"]),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_step(steps, error, words):
    assert_refused(lambda: Schedule(steps), error, words)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(rate=Schedule([(0, "10mbit"), (1, "-5mbit")])), ValueError, ["rate", "step at 1 s"]),
        (dict(rtt="20ms", loss=Schedule([(0, 0), (3, "150%")])), ValueError, ["loss", "step at 3 s"]),
        (dict(rtt=Schedule([(0, "20ms"), (1, "80ms")]), jitter="30ms"), ValueError, ["jitter", "step at 0"]),
        (dict(rate="10mbit", queue=Schedule([(0, "pfifo")])), ValueError, ["queue", "cannot change while a flow runs"]),
        (dict(police=Schedule([(0, "10mbit")])), ValueError, ["police", "cannot change"]),
        (
            dict(to_client={"distribution": Schedule([(0, "normal")])}, rtt="10ms", jitter="1ms"),
            ValueError,
            ["to_client.distribution", "cannot change"],
        ),
    ],
)
def test_a_link_refuses_a_step_its_field_refuses_naming_field_and_step(kwargs, error, words):
    assert_refused(lambda: Link(**kwargs), error, words)


def test_a_changing_link_starts_as_its_first_step_and_knows_each_later_one():
    link = Link(rtt="20ms", to_client={"rate": STEPS})
    assert link.changing and link.change_times == [2.0, 4.0]
    assert link.rate_bps == 40e6 and link.at(2.5).rate_bps == 10e6 and link.at(4).rate_bps == 40e6
    assert link.toward_server.changes == ()  # the other direction never changes
    assert link.at(3).rtt_s == pytest.approx(0.020) and not link.at(3).changing
    assert "then at 2 s: to client: 10 Mbit/s" in link.describe()
    # In series with an access link, the path changes when the bottleneck does.
    path = Link.in_series(Link(rtt="10ms"), link)
    assert path.change_times == [2.0, 4.0] and path.at(3).rate_bps == 10e6 and path.at(3).rtt_s == pytest.approx(0.030)
    assert not Link(rate=Schedule([(0, "10mbit")])).changing


def test_repeat_lays_a_pattern_out_period_after_period():
    schedule = Schedule.repeat([(0, "10mbit"), (0.5, "2mbit")], period=1, until=3)
    assert schedule.steps == (
        (0, "10mbit"),
        (0.5, "2mbit"),
        (1.0, "10mbit"),
        (1.5, "2mbit"),
        (2.0, "10mbit"),
        (2.5, "2mbit"),
    )
    assert_refused(lambda: Schedule.repeat([(0, 1), (2, 2)], period=1, until=3), ValueError, ["period"])


def _trace(tmp_path, lines, name="trace.up"):
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    return path


def test_a_mahimahi_trace_becomes_rate_steps(tmp_path):
    # 1 opportunity per ms for 2 s, then 4 per ms for 2 s: 12 then 48 Mbit/s of 1500-byte packets.
    trace = _trace(tmp_path, [ms for ms in range(1, 2001)] + [ms for ms in range(2001, 4001) for _ in range(4)])
    schedule = Schedule.from_mahimahi(trace, interval=0.1)
    assert schedule.steps == ((0.0, "12000000bit"), (2.0, "48000000bit"))
    # Repeating as mahimahi replays it.
    assert Schedule.from_mahimahi(trace, duration=6).steps == (
        (0.0, "12000000bit"),
        (2.0, "48000000bit"),
        (4.0, "12000000bit"),
    )
    # An outage (a bin without opportunities) takes the trace's slowest rate: htb cannot stop a class.
    gap = _trace(tmp_path, [1, 2, 3, 300], name="gap.up")
    assert [value for _, value in Schedule.from_mahimahi(gap, interval=0.1).steps] == ["360000bit", "120000bit"]


@pytest.mark.parametrize(
    "content, words",
    [
        ("", ["empty"]),
        ("1\n2\nhello\n", ["line 3", "not a Mahimahi trace"]),
        ("5\n3\n", ["line 2", "goes back in time"]),
        ("0\n0\n", ["more than 0 ms"]),
        ("1.5\n", ["line 1", "whole milliseconds"]),
    ],
)
def test_a_file_that_is_not_a_trace_is_refused(tmp_path, content, words):
    path = tmp_path / "bad.trace"
    path.write_text(content)
    assert_refused(lambda: Schedule.from_mahimahi(path), ValueError, [str(path), *words])


def test_a_changing_link_on_a_star_s_classified_links_is_refused_before_anything_is_built():
    with Lab() as lab:
        assert_refused(
            lambda: lab.star(servers=2, links=[Link(rate=STEPS), Link(rate="10mbit")]),
            ValueError,
            ["Schedule", "cannot change in place"],
        )
        assert lab.closed is False and not lab.results


@pytest.mark.tcpnet_needs("cubic")
def test_a_rate_that_steps_down_and_back_is_followed_phase_by_phase(tcpnet, tmp_path):
    """40 -> 10 -> 40 Mbit/s at 2 s and 4 s under a 6 s cubic flow on the host: each step lands at its time (both
    directions in one message, the class's rate read back), each phase starts when its step was applied, and from
    0.5 s after each step the 0.25 s rate samples average within 12% of the phase's payload rate (measured 1.00x in
    each phase: 38.3, 9.6, 38.3 Mbit/s against 38.26 / 9.56 / 38.26).

    How late a step lands is the scheduler's (benchmarks/bench_link_timer.py, beside CPU hogs: SCHED_FIFO p99
    under 0.1 ms, max 0.06-5.0 ms; unprivileged p99 0.1 ms, max 2.9-3.7 ms), so it is bounded here by what it would
    distort: 5% of the 2 s phase it opens, the share a late step hands to the previous rate. A 5 ms bound failed a
    fresh-clone CI run's rootless session (6.9 ms, beside a CPU hog)."""
    result = tcpnet.pair(Link(rate=STEPS)).transfer(duration=6, cc="cubic")
    figures = result.describe() + "\n" + "\n".join(map(str, result.link_changes))
    assert [step["at"] for step in result.link_changes] == [2.0, 2.0, 4.0, 4.0], figures
    for step in result.link_changes:
        assert 0 <= step["applied_at"] - step["at"] <= 0.05 * 2.0, figures
        assert step["settings"]["rate_bps"] == model.parse_rate(STEPS.value_at(step["at"])), figures
    phases = result.phases
    assert [p.scheduled_at for p in phases] == [0.0, 2.0, 4.0], figures
    applied = [max(step["applied_at"] for step in result.link_changes if step["at"] == at) for at in (2.0, 4.0)]
    assert [p.start_s for p in phases[1:]] == applied, figures
    origin = result.first_byte_at - result.schedule_origin
    samples = [(t + origin, bps) for t, bps in result.rate_series(0.25)]
    for phase in phases:
        payload = model.link_goodput(phase.link.rate_bps)
        steady = [bps for t, bps in samples if phase.start_s + 0.5 + 0.25 <= t <= phase.end_s]
        assert steady, figures
        assert sum(steady) / len(steady) == pytest.approx(payload, rel=0.12), figures
        assert phase.goodput_bps <= 1.03 * payload, figures
    # The throughput plot shades the phases, each with its own model rate.
    (plot,) = [path for path in result.plot(tmp_path) if path.name.endswith("-throughput.png")]
    assert plot.stat().st_size > 10_000
    # Put back as it started once the flow is over: the next transfer's first phase is 40 Mbit/s again.
    again = tcpnet.pair(Link(rate=STEPS))
    assert again.transfer(duration=1, cc="cubic").phases[0].link.rate_bps == 40e6


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_the_timer_process_sends_each_step_and_is_gone_after(tcpnet):
    """The steps go out from a process of their own (a thread of the test's process woke 5.2 ms late beside a CPU
    hog in fresh-clone CI run ci43: it needs the interpreter lock the samplers hold). Beside a hog in a two-worker
    session, 64 steps were acked 0.14 ms (median) and at most 0.77 ms after their time, the thread's 3.2 ms at p90
    and 6.0 ms at most. Stopped early, it sends nothing more; either way it is gone after stop()."""
    pair = tcpnet.pair(Link(rate=Schedule([(0, "40mbit"), (0.2, "10mbit"), (30, "20mbit")])))
    changes = link_changes.LinkChanges(pair.world)
    timer = changes._timer.pid
    assert _alive(timer)
    changes.start()
    time.sleep(0.5)
    applied = changes.stop()
    assert not _alive(timer)
    assert [step["at"] for step in applied] == [0.2, 0.2], applied  # both directions; not the step at 30 s
    assert all(step["settings"]["rate_bps"] == 10e6 and step["timer"] for step in applied), applied
    assert pair.world.read_back([(end, way.phases[0][1], way) for end, way in pair.world.changing_ends()]) == {
        end.key: {"rate_bps": 40e6, "limit": 1000} for end, _ in pair.world.changing_ends()
    }  # put back
    unstarted = link_changes.LinkChanges(pair.world)
    pid = unstarted._timer.pid
    assert unstarted.stop() == [] and not _alive(pid)


@pytest.mark.tcpnet_needs("cubic")
def test_a_timer_slow_to_start_does_not_make_t0_late(tcpnet, tmp_path, monkeypatch):
    """The timer is waited for before any data moves: beside a CPU hog the emulated guest's timer took ~1.9 s to
    start while the flow already ran (fresh-clone CI run ci46), so t=0 came that late and a step at 2 s landed
    3.9 s into the flow. Here a timer that takes 1.5 s to start: the flow's first byte still comes at t=0."""
    slow = tmp_path / "slow_timer.py"
    slow.write_text(
        "import runpy, sys, time\ntime.sleep(1.5)\n"
        f"sys.argv[0] = {link_changes._TIMER!r}\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    monkeypatch.setattr(link_changes, "_TIMER", str(slow))
    result = tcpnet.pair(Link(rate=Schedule([(0, "40mbit"), (1, "10mbit")]))).transfer(duration=2, cc="cubic")
    figures = result.describe() + "\n" + "\n".join(map(str, result.link_changes))
    assert abs(result.first_byte_at - result.schedule_origin) < 0.1, figures
    assert result.phases[1].start_s == pytest.approx(1.0, abs=0.01), figures  # the step 1 s after the first byte


def test_the_timer_process_dies_with_the_process_that_started_it():
    """A test process killed outright (SIGKILL, a crash) takes its timer with it: no step is sent into a world
    being swept, and no socket of it keeps a namespace alive."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            f"""
import os, subprocess, sys, time
timer = subprocess.Popen([sys.executable, "-I", "-S", {link_changes._TIMER!r}, str(os.getpid())],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
print(timer.stdout.readline().strip(), timer.pid, flush=True)
timer.stdin.write('[{{"at": ' + repr(time.monotonic() + 60) + ', "messages": []}}]\\n')
timer.stdin.flush()
time.sleep(0.2)  # it has read its plan and sleeps until the step in a minute
os._exit(0)  # no clean-up
""",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    ready, pid = child.stdout.rsplit(" ", 1)
    assert '"ready"' in ready
    deadline = time.monotonic() + 5
    while _alive(int(pid)) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not _alive(int(pid))


@pytest.mark.tcpnet_needs("cubic")
def test_a_mahimahi_trace_drives_the_rate(tcpnet, tmp_path):
    """A trace of 1 opportunity/ms for 2 s then 4/ms for 2 s: 12 then 48 Mbit/s, each phase's goodput from 0.5 s
    after its start within 15% of its payload rate."""
    trace = _trace(tmp_path, [ms for ms in range(1, 2001)] + [ms for ms in range(2001, 4001) for _ in range(4)])
    result = tcpnet.pair(Link(rate=Schedule.from_mahimahi(trace))).transfer(duration=4, cc="cubic")
    figures = result.describe()
    origin = result.first_byte_at - result.schedule_origin
    samples = [(t + origin, bps) for t, bps in result.rate_series(0.25)]
    for phase, rate in zip(result.phases, (12e6, 48e6)):
        steady = [bps for t, bps in samples if phase.start_s + 0.75 <= t <= phase.end_s]
        assert sum(steady) / len(steady) == pytest.approx(model.link_goodput(rate), rel=0.15), figures


@pytest.mark.tcpnet_needs("cubic")
def test_a_flow_that_follows_passes_and_one_that_cannot_fails_naming_the_phase(tcpnet):
    """10 -> 40 -> 10 Mbit/s. An autotuned cubic flow follows (each phase within 10% of the model; measured
    1.00x). A writer paced at 15.7 Mbit/s (64 KB x 30/s) follows the model too, which knows its bound, but cannot
    fill the 40 Mbit/s phase: judged against the link it fails naming phase 1 alone, with the table and a plot."""
    steps = Link(rate=Schedule([(0, "10mbit"), (1.5, "40mbit"), (3, "10mbit")]))
    follows = tcpnet.pair(steps).transfer(duration=4.5, cc="cubic")
    judged = assert_follows_schedule(follows, rel=0.1)
    assert [phase.number for phase, _, _ in judged] == [0, 1, 2]
    paced = tcpnet.pair(steps).transfer(duration=4.5, cc="cubic", writer=Pace(65536, 30))
    assert_follows_schedule(paced, rel=0.1)
    with pytest.raises(AssertionError) as failure:
        assert_follows_schedule(paced, rel=0.1, against="link")
    text = str(failure.value)
    assert text.startswith("1 of 3 phases outside ±10% of the link rate: phase 1 (both ways: 40 Mbit/s"), text
    assert "OUTSIDE" in text and "38.26 Mbit/s" in text and "plot: " in text, text
    plot = text.rsplit("plot: ", 1)[1].strip()
    assert plot.endswith(".png") and paced.artifacts[-1].name == plot.rsplit("/", 1)[1]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(rel=0), ["rel"]),
        (dict(rel=0.1, settle=-1), ["settle"]),
        (dict(rel=0.1, against="rate"), ["against"]),
    ],
)
def test_assert_follows_schedule_refuses_bad_arguments(kwargs, words):
    assert_refused(lambda: assert_follows_schedule(None, **kwargs), ValueError, words)


def test_your_own_program_meets_the_schedule_too(tcpnet):
    """pair.observe() is the one observation path: a user's client fetching 6 MB through 20 -> 5 Mbit/s (a step at
    2 s from the start of the with block) has two phases, each at its link's payload rate within 12% once settled
    for 0.5 s. The client is a Python program: under UML 6.1 its first byte came 0.58-0.61 s into the block (its
    interpreter's start), which left a step at 1 s a first phase shorter than its settling time; at 2 s the first
    phase carries 3.3-4.7 MB (from 0.6 s or from at once) and the second at least 1.3 MB, 2 s at 5 Mbit/s."""
    import sys

    app = os.path.join(os.path.dirname(os.path.abspath(__file__)), "userapp.py")
    pair = tcpnet.pair(Link(rate=Schedule([(0, "20mbit"), (2, "5mbit")])))
    pair.server.popen([sys.executable, app, "serve", pair.server.address, "9000"])
    with pair.observe() as seen:
        pair.client.run([sys.executable, app, "get", pair.server.address, "9000", "6000000"], check=True)
    (flow,) = seen.flows
    assert [step["at"] for step in flow.link_changes] == [2.0, 2.0], flow.describe()
    judged = assert_follows_schedule(flow, rel=0.12, settle=0.5, against="link")
    assert [phase.number for phase, _, _ in judged] == [0, 1], flow.describe()


def test_a_netem_change_sends_the_fields_pyroute2_leaves_out_at_zero():
    """netem_change keeps the correlations, reorder and corrupt it is not sent: a change carries them at zero."""
    from pytest_tcpnet.netlink.qdisc import _netem_kwargs

    calm = Link(rtt="20ms").toward_client
    noisy = Link(rtt="20ms", corrupt="1%", reorder="5%", loss="1%", loss_correlation="25%").toward_client
    zeros = dict(_netem_kwargs(calm, every_field=True)["options_extra"])
    assert zeros == {1: bytes(12), 3: bytes(8), 4: bytes(8)}  # TCA_NETEM_CORR, _REORDER, _CORRUPT
    assert "options_extra" not in _netem_kwargs(noisy, every_field=True)  # pyroute2 sends each non-zero one
    assert "options_extra" not in _netem_kwargs(calm)  # building a qdisc: the kernel's defaults are zero
