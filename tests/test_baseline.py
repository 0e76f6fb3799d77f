"""Baselines: saved runs of real sessions, and a run that got slower failing against them with the table."""

import json
from pathlib import Path

import pytest

import pytest_tcpnet
from pytest_tcpnet.report.__main__ import main
from pytest_tcpnet.report.baseline import MIN_RUNS, TIMING_FLOOR_S, Baseline, load_baseline, t_quantile

pytest_plugins = ["pytester"]


def _row(test="t.py::test_a", flow=0, bps=10e6, run="r1", kernel="6.1.0", rcvbuf=None, outcome="passed", duration=None):
    return {
        "schema": 1,
        "duration_s": duration,
        "test": test,
        "flow": flow,
        "kernel": kernel,
        "measured_bps": bps,
        "outcome": outcome,
        "direction": "download",
        "link": {"describe": "20 Mbit/s"},
        "cc": "cubic",
        "buffers": {"sndbuf_requested": None, "rcvbuf_requested": rcvbuf},
        "run": {"id": run},
    }


def _saved(values, **kwargs):
    return [_row(bps=v, run=f"r{i}", **kwargs) for i, v in enumerate(values)]


def test_t_quantiles_are_student_s_at_99_9_percent():
    assert t_quantile(4) == pytest.approx(8.610) and t_quantile(9) == pytest.approx(4.781)
    assert t_quantile(22) == t_quantile(20)  # between table entries: the wider one
    assert t_quantile(1000) == pytest.approx(3.373)
    with pytest.raises(ValueError, match="at least 1"):
        t_quantile(0)


def test_a_figure_inside_the_saved_runs_spread_holds_and_one_outside_moved():
    # Five runs at 10 Mbit/s +-1%: sd/mean 0.84%, tolerance t(4) x 0.84% x sqrt(1 + 1/5) = 7.9%.
    baseline = Baseline(_saved([9.9e6, 10.0e6, 10.1e6, 10.0e6, 9.9e6]))
    (held,) = baseline.judge([_row(bps=9.5e6)])
    assert held.verdict == "held" and held.tolerance == pytest.approx(0.0791, abs=0.001)
    (moved,) = baseline.judge([_row(bps=9.0e6)])
    assert moved.verdict == "moved" and moved.change == pytest.approx(-0.098, abs=0.001)
    assert "9.8% slower" in moved.describe() and "tolerance 7.9%" in moved.describe()
    (faster,) = baseline.judge([_row(bps=11.0e6)])
    assert faster.verdict == "moved" and "faster" in faster.describe()
    # Three new runs judged by their mean: the interval narrows with sqrt(1/3 + 1/5).
    (mean,) = baseline.judge([_row(bps=9.4e6), _row(bps=9.4e6), _row(bps=9.4e6)])  # -5.8% against +-5.3%
    assert mean.verdict == "moved" and mean.tolerance < held.tolerance


def test_a_flow_is_credited_with_no_less_spread_than_the_baseline_s_typical_flow():
    noisy = [*_saved([9e6, 10e6, 11e6], test="t.py::test_b"), *_saved([9e6, 10e6, 11e6], test="t.py::test_c")]
    steady = _saved([10e6, 10e6, 10e6])  # runs that agree to the bit
    baseline = Baseline(noisy + steady)
    assert baseline.typical_spread == pytest.approx(0.1)
    (judged,) = baseline.judge([_row(bps=10.1e6)])
    assert judged.verdict == "held" and judged.tolerance > 0.1


def test_no_flow_is_judged_finer_than_its_clock():
    """Runs that agree to 0.03% (as five back-to-back saves did) give a ~0.1% interval; a busy session's unchanged
    run read 0.6% slower. The floor: TIMING_FLOOR_S of the flow's duration, 1.25% of a 2 s flow."""
    baseline = Baseline(_saved([19.124e6, 19.130e6, 19.127e6, 19.126e6, 19.129e6], duration=2.0))
    (held,) = baseline.judge([_row(bps=19.01e6, duration=2.0)])
    assert held.verdict == "held" and held.tolerance == pytest.approx(TIMING_FLOOR_S / 2.0)
    assert "timing floor: 25 ms of a 2 s flow" in held.describe()
    (moved,) = baseline.judge([_row(bps=18.8e6, duration=2.0)])
    assert moved.verdict == "moved" and "1.7% slower" in moved.describe()
    # A long flow's floor is below its runs' own spread: the prediction interval decides.
    wide = Baseline(_saved([9.9e6, 10.0e6, 10.1e6, 10.0e6, 9.9e6], duration=30.0)).judge([_row(bps=9.5e6)])[0]
    assert wide.tolerance == pytest.approx(0.0791, abs=0.001) and "prediction interval" in wide.describe()


def test_flows_that_cannot_be_judged_say_why():
    baseline = Baseline(
        [
            *_saved([10e6, 10e6]),
            *_saved([10e6, 11e6, 12e6], test="t.py::test_sweep", rcvbuf=None)[:2],
            _row(test="t.py::test_sweep", bps=5e6, run="r9", rcvbuf=4096),
            _row(test="t.py::test_failed", outcome="failed"),
        ]
    )
    reasons = {
        j.key[0]: j.reason
        for j in baseline.judge(
            [_row(), _row(test="t.py::test_new"), _row(test="t.py::test_sweep"), _row(test="t.py::test_failed")]
        )
    }
    assert reasons == {
        "t.py::test_a": f"2 saved run(s), {MIN_RUNS} needed to learn the spread",
        "t.py::test_new": "not in baseline",
        "t.py::test_failed": "not in baseline",
        "t.py::test_sweep": "its conditions differ between the saved runs (a hypothesis sweep?)",
    }
    # The same test on another kernel is another flow.
    (other,) = Baseline(_saved([10e6] * 5)).judge([_row(kernel="6.12.0")])
    assert other.verdict == "not judged" and other.reason == "not in baseline"


def test_changed_conditions_are_named():
    (judged,) = Baseline(_saved([10e6, 10.1e6, 9.9e6])).judge([_row(bps=5e6, rcvbuf=16384)])
    assert judged.changed == {"SO_RCVBUF": (None, 16384)}
    assert "conditions changed: SO_RCVBUF auto -> 16384" in judged.describe()


@pytest.mark.parametrize(
    "content, error",
    [
        (None, "does not exist"),
        ("", "holds no flows: save one first"),
        ("{not json\n", "1: not a JSON line"),
        (
            '{"test": "t", "measured_bps": 1}\n',
            r"1: written by another version of pytest-tcpnet \(schema None; this one",
        ),
        (
            '{"schema": 3, "test": "t", "measured_bps": 1}\n',
            r"1: written by another version of pytest-tcpnet \(schema 3",
        ),
    ],
)
def test_a_bad_baseline_is_refused_with_the_reason(tmp_path, content, error):
    path = tmp_path / "baseline.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ValueError, match=error):
        load_baseline(path)


def test_diff_prints_the_table_and_fails_on_a_moved_flow(tmp_path, capsys):
    old, same, slow = tmp_path / "old.jsonl", tmp_path / "same.jsonl", tmp_path / "slow.jsonl"
    old.write_text("".join(json.dumps(r) + "\n" for r in _saved([9.9e6, 10.0e6, 10.1e6, 10.0e6, 9.9e6])))
    same.write_text(json.dumps(_row(bps=9.95e6)) + "\n")
    slow.write_text(json.dumps(_row(bps=6e6, rcvbuf=16384)) + "\n")
    assert main(["diff", str(old), str(same)]) == 0
    assert "1 held" in capsys.readouterr().out
    assert main(["diff", str(old), str(slow)]) == 1
    out = capsys.readouterr().out
    assert "-39.9%" in out and "moved" in out and "SO_RCVBUF auto -> 16384" in out
    with pytest.raises(SystemExit) as exit_info:
        main(["diff", str(tmp_path / "missing.jsonl"), str(same)])
    assert exit_info.value.code == 2 and "does not exist" in capsys.readouterr().err


# A real project: one 1.5 s upload on a 20 Mbit/s link (htb, so it runs on the host); SLOW=1 is the
# regression, an application that writes 64 KB 20 times a second (10.5 Mbit/s) instead of as fast as it can.
PROJECT = """
import os
from pytest_tcpnet import Link, Pace

def test_upload(tcpnet):
    pair = tcpnet.pair(link=Link(rate="20mbit"))
    writer = Pace(chunk=65536, per_second=20) if os.environ.get("SLOW") else None
    pair.transfer(duration=1.5, direction="upload", writer=writer, timeout=600)
"""


@pytest.fixture
def project(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(Path(pytest_tcpnet.__file__).parents[1]))
    monkeypatch.delenv("SLOW", raising=False)
    pytester.makepyfile(test_upload=PROJECT)
    return pytester


@pytest.mark.tcpnet_needs("privilege")
def test_a_slower_run_fails_against_saved_runs_and_an_unchanged_one_passes(project, monkeypatch):
    """Five saved runs of a link-bound upload, then an unchanged run that holds and a paced writer that fails with
    the table. Measured: saved runs 19.124-19.130 Mbit/s (sd 0.013%, interval ±0.1%, so the 1.7% timing floor of a
    1.5 s flow judges); unchanged runs 19.12-19.13 (5 of 5 held quiet, 5 of 5 beside a CPU hog) and once 19.01
    (0.6% slower) in a busy two-worker session; the paced writer 10.63 Mbit/s, 44.4% slower."""
    for run in range(5):
        saved = project.runpytest(
            "-p", "no:cacheprovider", "--tcpnet-baseline=base.jsonl", "--tcpnet-baseline-mode=save"
        )
        saved.assert_outcomes(passed=1)
        saved.stdout.fnmatch_lines(
            [f"tcpnet baseline: 1 flow(s) appended to *base.jsonl, which now holds {run + 1} run(s)"]
        )
    same = project.runpytest("-p", "no:cacheprovider", "--tcpnet-baseline=base.jsonl")
    same.assert_outcomes(passed=1)
    same.stdout.fnmatch_lines(["*tcpnet baseline *base.jsonl (5 saved runs): 1 held*", "*test_upload*held*"])
    monkeypatch.setenv("SLOW", "1")
    slow = project.runpytest("-p", "no:cacheprovider", "--tcpnet-baseline=base.jsonl")
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        [
            "*tcpnet baseline *base.jsonl: 1 flow(s) moved beyond the saved runs' spread*",
            "*test_upload.py::test_upload on *: * against * over 5 saved run(s), *% slower; tolerance *",
            "*test*kernel*before*runs*after*change*tolerance*verdict*conditions changed*",
        ]
    )
    assert (project.path / "base.jsonl").read_text().count("\n") == 5  # compare never writes to the baseline


@pytest.mark.parametrize("content, error", [(None, "does not exist"), ("garbage\n", "not a JSON line")])
def test_a_bad_baseline_stops_the_session_before_any_test_runs(project, content, error):
    if content is not None:
        (project.path / "base.jsonl").write_text(content)
    result = project.runpytest("-p", "no:cacheprovider", "--tcpnet-baseline=base.jsonl")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--tcpnet-baseline=*base.jsonl: *{error}*"])
    assert "test_upload" not in result.stdout.str()
