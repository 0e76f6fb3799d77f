"""A suite cut into shards with pytest-split, and merged back: the same tests, outcomes and flows as one serial run."""

import json
import sys
import textwrap

import pytest

pytest.importorskip("pytest_split", reason="needs the shard extra (pytest-split): pip install -e '.[shard]'")

from pytest_tcpnet.report.results_file import read_results  # noqa: E402

# A small user suite: flows measured on real pairs, plain passes, a skip, an expected failure, a failure.
SUITE = textwrap.dedent("""
    import pytest
    from pytest_tcpnet import Link

    @pytest.mark.tcpnet_needs("privilege", "htb")
    @pytest.mark.parametrize("rate", [20, 40, 80])
    def test_flow(tcpnet, rate):
        pair = tcpnet.pair(link=Link(rate=f"{rate}mbit"))
        result = pair.transfer(nbytes=200_000)
        assert result.nbytes == 200_000

    @pytest.mark.parametrize("i", range(4))
    def test_plain(i):
        assert i >= 0

    def test_skipped():
        pytest.skip("not here")

    @pytest.mark.xfail(reason="known")
    def test_expected_failure():
        assert False

    def test_failing():
        assert 1 == 2
""")
SPLITS = 3


def _pytest(children, cwd, *args):
    return children.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_suite.py", *args], cwd=cwd, timeout=300
    )


def _merge(children, cwd, *files):
    return children.run([sys.executable, "-m", "pytest_tcpnet.report", "merge", *map(str, files)], cwd=cwd, timeout=60)


def _outcomes(results):
    return {row["test"]: row["outcome"] for row in results.tests}


def _flows(results):
    return sorted((row["test"], row["flow"], row["nbytes"], row["direction"]) for row in results.flows)


@pytest.mark.tcpnet_needs("privilege", "htb")
def test_shards_merged_equal_the_serial_run_and_merge_names_what_is_wrong(children, tmp_path):
    """Serial, then three shards one after another (the last with two xdist workers): merged, the shards ran every
    test once with the serial run's outcomes and flows. A lost shard, a conflicting outcome, a corrupt line and a
    file of another version each make merge exit non-zero, naming the file and the tests."""
    (tmp_path / "test_suite.py").write_text(SUITE)
    serial = _pytest(children, tmp_path, "--tcpnet-results=serial.jsonl", "--junitxml=serial.xml")
    assert serial.returncode == 1, serial.stdout[-3000:]  # test_failing
    # The serial run's JUnit file becomes pytest-split's stored durations, which the shards balance by.
    stored = children.run(
        [sys.executable, "-m", "pytest_tcpnet.report", "durations", "serial.xml", "--out", "durations.json"],
        cwd=tmp_path,
        timeout=60,
    )
    assert stored.returncode == 0, stored.stdout + stored.stderr
    durations = json.loads((tmp_path / "durations.json").read_text())
    assert sorted(durations) == sorted(row["test"] for row in read_results([tmp_path / "serial.jsonl"]).tests)
    shards = []
    for group in range(1, SPLITS + 1):
        workers = ["-n", "2"] if group == SPLITS else []
        out = _pytest(
            children,
            tmp_path,
            f"--splits={SPLITS}",
            f"--group={group}",
            f"--tcpnet-results=shard{group}.jsonl",
            "--durations-path=durations.json",
            "--splitting-algorithm=least_duration",
            *workers,
        )
        assert out.returncode in (0, 1), out.stdout[-3000:]
        shards.append(tmp_path / f"shard{group}.jsonl")

    whole, parts = read_results([tmp_path / "serial.jsonl"]), read_results(shards)
    assert len(whole.tests) == 10 and len(parts.tests) == 10, (whole.tests, parts.tests)
    assert _outcomes(parts) == _outcomes(whole)
    assert set(_outcomes(whole).values()) == {"passed", "skipped", "xfailed", "failed"}
    assert _flows(parts) == _flows(whole) and len(_flows(whole)) == 3
    assert {tuple(s["collected"]) for s in parts.sessions} == {tuple(whole.sessions[0]["collected"])}
    assert sorted(s["shard"]["group"] for s in parts.sessions) == [1, 2, 3]
    assert all(len(s["collected"]) == 10 for s in parts.sessions)  # collected before the split, under xdist too

    merged = _merge(children, tmp_path, *shards)
    assert merged.returncode == 0, merged.stdout + merged.stderr
    assert "10 test(s) ran in 3 file(s): 1 failed, 7 passed, 1 skipped, 1 xfailed" in merged.stdout, merged.stdout
    assert "ran in no shard" not in merged.stdout and "conflicting" not in merged.stdout

    # A shard lost: its tests ran in no shard.
    lost = _merge(children, tmp_path, *shards[1:])
    first = {row["test"] for row in read_results(shards[:1]).tests}
    assert lost.returncode == 1 and first, lost.stdout
    for test in first:
        assert f"ran in no shard: {test}" in lost.stdout

    # Two shards claiming one test with different outcomes.
    row = next(row for row in read_results(shards[1:2]).tests)
    claim = dict(row, outcome="failed" if row["outcome"] != "failed" else "passed")
    claim.pop("source"), claim.pop("path")
    (tmp_path / "again.jsonl").write_text(json.dumps(claim) + "\n")
    conflict = _merge(children, tmp_path, *shards, tmp_path / "again.jsonl")
    assert conflict.returncode == 1, conflict.stdout
    assert f"conflicting outcomes: {row['test']}: " in conflict.stdout and "again.jsonl" in conflict.stdout
    assert "did not finish" in conflict.stdout  # again.jsonl has a test but no session row

    # A corrupt line, and a file written by another version: errors naming file and line.
    (tmp_path / "corrupt.jsonl").write_text(shards[0].read_text() + "{truncated\n")
    corrupt = _merge(children, tmp_path, tmp_path / "corrupt.jsonl")
    lines = len(shards[0].read_text().splitlines())
    assert corrupt.returncode == 2 and f"corrupt.jsonl:{lines + 1}: not a JSON line" in corrupt.stderr, corrupt.stderr
    old = json.loads(shards[0].read_text().splitlines()[0])
    (tmp_path / "future.jsonl").write_text(json.dumps(dict(old, schema=99)) + "\n")
    future = _merge(children, tmp_path, tmp_path / "future.jsonl")
    assert future.returncode == 2 and "future.jsonl:1: written by another version" in future.stderr, future.stderr


def test_merge_writes_one_baseline_from_baselines_saved_per_shard(tmp_path):
    """Baselines saved per shard (--tcpnet-baseline-mode=save) merge into one file that load_baseline reads."""
    from pytest_tcpnet.report import ResultsWriter
    from pytest_tcpnet.report.__main__ import main
    from pytest_tcpnet.report.baseline import load_baseline
    from pytest_tcpnet.report.rows import SCHEMA

    def flow(test, bps):
        return {"schema": SCHEMA, "test": test, "flow": 0, "measured_bps": bps, "kernel": "6.1", "link": None}

    for shard, test in ((1, "t.py::a"), (2, "t.py::b")):
        for run in range(3):
            writer = ResultsWriter(tmp_path / f"base{shard}.jsonl", append=True)
            writer.write([flow(test, 10e6 + run)])
            writer.close()
    assert (
        main(
            [
                "merge",
                str(tmp_path / "base1.jsonl"),
                str(tmp_path / "base2.jsonl"),
                "--write",
                str(tmp_path / "b.jsonl"),
            ]
        )
        == 0
    )
    baseline = load_baseline(tmp_path / "b.jsonl")
    assert {rows[0]["test"] for rows in baseline.flows.values()} == {"t.py::a", "t.py::b"} and baseline.runs == 6


def test_a_sweep_draws_other_examples_in_another_shard_and_the_same_in_a_rerun():
    """strategies.seed_for_shard: the shard's seed decides what a sweep draws (over the derandomized CI profile); a
    test's own @seed is kept."""
    from hypothesis import given, seed, settings
    from hypothesis import strategies as st

    from pytest_tcpnet import strategies

    def sweep(drawn):
        @settings(parent=strategies.sweep_ci, max_examples=5, phases=["generate"])
        @given(value=st.integers(0, 10**9))
        def test(value):
            drawn.append(value)

        return test

    runs = {}
    for name, group in (("one", 1), ("one again", 1), ("two", 2)):
        drawn = []
        test = sweep(drawn)
        assert strategies.seed_for_shard(test, splits=2, group=group)
        test()
        runs[name] = drawn
    assert runs["one"] == runs["one again"] and runs["one"] != runs["two"], runs
    drawn = []
    own = seed(7)(sweep(drawn))
    assert not strategies.seed_for_shard(own, splits=2, group=2)
    own()
    mine = []
    seed(7)(sweep(mine))()
    assert drawn == mine
    assert strategies.shard_seed("t", splits=4, group=1) != strategies.shard_seed("t", splits=4, group=2)
    assert strategies.shard_seed("t", splits=4, group=1, base=5) != strategies.shard_seed("t", splits=4, group=1)
