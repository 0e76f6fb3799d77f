"""Verdicts over repeated measurements: sequential comparisons, majorities, intervals, readable failures."""

import os
import textwrap

import pytest

from pytest_tcpnet import Link, Pace, assert_faster, assert_intervals_within, assert_throughput_within
from pytest_tcpnet.assertions.verdicts import confirm_failure, judge_trials

pytest_plugins = ["pytester"]


class Fake:
    """A stand-in result for the verdict logic alone (the real-lab tests below use real transfers)."""

    def __init__(self, bps, series=()):
        self.throughput_bps = bps
        self._series = list(series)
        self.min_rtt_s = 0.01

    def rate_series(self, interval=0.1):
        return self._series

    def describe(self):
        return f"fake {self.throughput_bps:g}"


def runner(values):
    it = iter(values)
    calls = []

    def run():
        value = next(it)
        calls.append(value)
        return Fake(value)

    run.calls = calls
    return run


def test_clear_comparison_stops_after_the_minimum():
    a, b = runner([100] * 10), runner([10] * 10)
    trials = assert_faster(a, b, factor=3)
    assert len(trials) == 2 and len(a.calls) == len(b.calls) == 2


def test_noisy_comparison_runs_more_trials_and_interleaves():
    a = runner([30, 60, 30, 60, 30, 60])
    b = runner([10] * 6)
    trials = assert_faster(a, b, factor=2, max_trials=6)
    assert len(trials) > 2
    assert [t.a_first for t in trials[:2]] == [True, False]


def test_failed_comparison_lists_every_trial():
    with pytest.raises(AssertionError) as info:
        assert_faster(runner([11, 12, 9, 10, 11, 10]), runner([10] * 6), factor=3, label_a="bbr", label_b="cubic")
    message = str(info.value)
    assert "expected at least 3x" in message and message.count("bbr,cubic") + message.count("cubic,bbr") >= 2
    assert "95% interval" in message


def test_bad_arguments_fail_before_measuring():
    with pytest.raises(ValueError, match="factor"):
        assert_faster(runner([1]), runner([1]), factor=0)
    with pytest.raises(TypeError, match="run_a"):
        assert_faster(Fake(1), runner([1]))


def test_majority_stops_early():
    passed, results, verdicts = judge_trials(runner([10, 10, 0, 0, 0]), lambda r: r.throughput_bps > 5, trials=3)
    assert passed and len(results) == 2
    passed, results, _ = judge_trials(runner([0, 10, 0]), lambda r: r.throughput_bps > 5, trials=3)
    assert not passed and len(results) == 3


def test_repeated_throughput_claim_reports_all_trials():
    with pytest.raises(AssertionError, match=r"2 of 2 trials outside ±10%"):
        assert_throughput_within(runner([50, 51, 49]), 100, rel=0.1, trials=3)
    assert assert_throughput_within(runner([95, 30, 104]), 100, rel=0.1, trials=3).throughput_bps == 104


def test_confirm_failure_forgives_one_noisy_measurement():
    def check(result):
        assert result.throughput_bps > 50, "slow"

    values = iter([1, 100])
    assert confirm_failure(lambda: Fake(next(values)), check).throughput_bps == 100
    with pytest.raises(AssertionError, match="all 2 measurements"):
        confirm_failure(lambda: Fake(1), check)


def test_k_of_n_intervals_after_slow_start():
    series = [(0.05, 1e6), (0.15, 9e6), (0.25, 10e6), (0.35, 10.5e6), (0.45, 3e6), (0.55, 10e6), (0.65, 0)]
    steady = assert_intervals_within(Fake(10e6, series), 10e6, rel=0.1, k=3, rtt_s=0.02)
    assert steady[0][0] >= 0.06  # 10 Mbit/s x 20 ms = 17 segments: slow start skipped for ~3 RTTs
    with pytest.raises(AssertionError, match="4 of 5 steady-state intervals"):
        assert_intervals_within(Fake(10e6, series), 10e6, rel=0.1, k=5, rtt_s=0.02)


@pytest.mark.tcpnet_needs("htb")
def test_assert_faster_on_real_transfers(tcpnet):
    fast = tcpnet.pair(link=Link(rate="40mbit"))
    slow = tcpnet.pair(link=Link(rate="10mbit"))
    trials = assert_faster(lambda: fast.transfer(nbytes=1_000_000), lambda: slow.transfer(nbytes=1_000_000), factor=2.5)
    assert 2 <= len(trials) <= 6 and all(t.ratio > 2.5 for t in trials)


@pytest.mark.tcpnet_needs("htb")
def test_a_false_claim_fails_with_the_readable_report(pytester, monkeypatch):
    # The inner session must import this checkout, not whatever copy is installed.
    monkeypatch.setenv("PYTHONPATH", os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    pytester.makepyfile(
        textwrap.dedent("""
        from pytest_tcpnet import Link, assert_throughput_within

        def test_twenty_megabit_link_carries_forty(tcpnet):
            result = tcpnet.pair(link=Link(rate="20mbit")).transfer(nbytes=2_000_000, rcvbuf=262144)
            assert_throughput_within(result, 40e6, rel=0.1)
    """)
    )
    outcome = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    outcome.assert_outcomes(failed=1)
    text = outcome.stdout.str()
    for words in (
        "AssertionError: throughput 1",
        "of the expected 40 Mbit/s",
        "measured",
        "predicted",
        "link 19.13 Mbit/s <- binds",
        "model: link-limited",
        "conditions: kernel",
        "link: both ways: 20 Mbit/s",
    ):
        assert words in text, text
    print(text[text.index("def test_twenty") : text.index("short test summary")])


#: (link, client Host sysctls, transfer options, the verdict): flows this project did not tune for the verdict.
#: A small SO_SNDBUF is judged at 20 ms (below): on an undelayed path it bounds nothing that matters. 1 MB writes
#: into it keep 55-126 KB in flight on 6.18 (C11), which fills a 20 Mbit/s htb queue (cwnd 89, srtt 24-50 ms:
#: samples half cwnd, half sndbuf in 3 runs), and unshaped the flow is CPU-bound: under -n 2 a starved writer
#: left the buffer empty in 52% of the samples ("app", seen in a fresh-clone CI run).
LIMIT_CASES = {
    "4 KB SO_RCVBUF at 100 Mbit/s": ({"rate": "100mbit"}, {}, {"nbytes": 2_000_000, "rcvbuf": 4096}, "rwnd"),
    # Half a second, not 2 MB: unshaped, 2 MB took 34 ms, and beside a CPU hog (fresh-clone CI run ci45) the sender's
    # sampler got fewer than three samples in, so the verdict fell back to the chrono counters.
    "client tcp_rmem 4096, unshaped": ({}, {"net.ipv4.tcp_rmem": "4096 4096 4096"}, {"duration": 0.5}, "rwnd"),
    "autotuned at 20 Mbit/s": ({"rate": "20mbit"}, {}, {"nbytes": 2_000_000}, "cwnd"),
    "writer paced at 16 KB x 25/s": ({"rate": "20mbit"}, {}, {"nbytes": 250_000, "writer": Pace(16384, 25)}, "app"),
}


@pytest.mark.tcpnet_needs("htb")
@pytest.mark.parametrize("case", LIMIT_CASES)
def test_limited_by_names_what_held_the_sender_on_real_transfers(tcpnet, case):
    from pytest_tcpnet import Host, assert_limited_by

    link, sysctls, options, label = LIMIT_CASES[case]
    pair = tcpnet.pair(link=Link(**link), client=Host(sysctls=sysctls))
    result = pair.transfer(**options)
    shares = assert_limited_by(result, label)
    assert result.limited_by == label and shares[label] > 0.5
    wrong = next(other for other in ("cwnd", "rwnd") if other != label)
    with pytest.raises(AssertionError, match=f"sender was {label}-limited, not {wrong}-limited: .* samples"):
        assert_limited_by(result, wrong)


#: The same kinds of flow at 20 ms RTT (netem: the VM): the verdicts must not depend on an undelayed path.
LIMIT_CASES_20MS = {
    "client tcp_rmem 4096": ({"rate": "20mbit"}, {"net.ipv4.tcp_rmem": "4096 4096 4096"}, {"nbytes": 300_000}, "rwnd"),
    # Writes no larger than the buffer: then it bounds what is in flight on every kernel (C11). 1 MB writes
    # are not judged here: 6.1 lets one write overshoot the buffer by up to ~700 KB (C11), so such a flow is
    # cwnd-bound while the write is queued and buffer-bound for its tail (33% sndbuf / 67% cwnd in the VM
    # beside a CPU hog in fresh-clone CI run ci31; > 50% sndbuf in earlier runs): no one label is right.
    "16 KB SO_SNDBUF, 16 KB writes": (
        {"rate": "20mbit"},
        {},
        {"nbytes": 1_000_000, "sndbuf": 16384, "write_size": 16384},
        "sndbuf",
    ),
    # bbr paces, so data waits behind the buffer with room in cwnd: the buffer still bounds it (12.3-13.7 Mbit/s
    # against the buffer's 12.5 and the link's 18.8). Its samples read "sndbuf" 0.84-0.93 under UML 6.1 and 6.12
    # beside a CPU hog (6 runs), where "cwnd" had taken 0.46-0.75 of them before data waiting for the stack counted
    # as the buffer's.
    "bbr behind a 16 KB SO_SNDBUF": (
        {"rate": "20mbit"},
        {},
        {"nbytes": 1_000_000, "sndbuf": 16384, "write_size": 16384, "cc": "bbr"},
        "sndbuf",
    ),
    "autotuned at 20 Mbit/s": ({"rate": "20mbit"}, {}, {"nbytes": 4_000_000}, "cwnd"),
    "writer paced at 16 KB x 25/s": ({"rate": "20mbit"}, {}, {"nbytes": 250_000, "writer": Pace(16384, 25)}, "app"),
}


@pytest.mark.tcpnet_needs("netem")
@pytest.mark.parametrize(
    "case",
    [pytest.param(case, marks=pytest.mark.tcpnet_needs("bbr")) if "bbr" in case else case for case in LIMIT_CASES_20MS],
)
def test_limited_by_at_20ms(tcpnet, case):
    from pytest_tcpnet import Host, assert_limited_by

    link, sysctls, options, label = LIMIT_CASES_20MS[case]
    result = tcpnet.pair(link=Link(rtt="20ms", **link), client=Host(sysctls=sysctls)).transfer(**options)
    assert assert_limited_by(result, label)[label] > 0.5
