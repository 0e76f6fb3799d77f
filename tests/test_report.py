"""Report logic without a lab: flow rows, summary and JUnit figures, artifact retention, results files, merging."""

import dataclasses
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_tcpnet import Host, Link, model
from pytest_tcpnet.locks import in_user_namespace
from pytest_tcpnet.report import (
    ArtifactStore,
    ResultsWriter,
    compare,
    comparison_table,
    flow_row,
    flow_rows,
    junit_properties,
    read_rows,
    summary_table,
)
from pytest_tcpnet.report.__main__ import main
from pytest_tcpnet.report.artifacts import directory_name, write_flows
from pytest_tcpnet.results import TransferResult, WindowProbe
from pytest_tcpnet.workload.fake import fake_result


def _result(nbytes=10_000_000, duration_s=2.0, kernel="6.18.44", rcvbuf=None):
    # A made-up result (the fake workload's records): only the row logic is under test
    # (tests/test_report_session.py feeds the same code real transfers).
    return fake_result(
        nbytes=nbytes,
        duration_s=duration_s,
        kernel=kernel,
        link=Link(rate="50mbit", rtt="20ms"),
        client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}),
        sysctls={"client": {"net.ipv4.tcp_rmem": "4096 4096 4096"}, "server": {}},
        rcvbuf_requested=rcvbuf,
        sender_buffers={"cc": "cubic", "sndbuf": 87040},
        receiver_buffers={"rcvbuf": 8192},
        sender_tcp_info={"rtt": 20500, "min_rtt": 20100, "total_retrans": 3},
        workload="bulk",
    )


@dataclasses.dataclass(frozen=True)
class _LaterResult(TransferResult):
    """A result with the attributes capture and analysis add later, to show rows pick them up by themselves."""

    @property
    def limited_by(self):
        return ("rwnd", {"rwnd": 0.9, "sndbuf": 0.0})

    @property
    def events(self):
        return {"window_full": 12, "retransmission": 2}

    @property
    def artifacts(self):
        return ["/tmp/x/flow.pcap", "/tmp/x/tsg.png"]

    @property
    def applied_rate(self):
        from pytest_tcpnet.analysis.impairments import AppliedRate, RateRun

        return AppliedRate(19.13e6, 9.55e6, 1.53, runs=(RateRun(1.3, 0.23, 9.4e6), RateRun(2.0, 1.3, 9.6e6)))


def test_row_holds_full_conditions_and_shows_missing_figures_as_missing():
    row = flow_row(_result(), test="tests/test_a.py::test_b", flow=0, outcome="passed")
    assert row["measured_bps"] == 40e6
    assert row["kernel"] == "6.18.44" and row["cc"] == "cubic" and row["retransmissions"] == 3
    assert row["link"]["rtt_s"] == pytest.approx(0.020) and row["link"]["toward_client"]["rate_bps"] == 50e6
    assert row["client"]["sysctls"] == {"net.ipv4.tcp_rmem": "4096 4096 4096"}
    assert row["buffers"] == {"sndbuf_requested": None, "sndbuf": 87040, "rcvbuf_requested": None, "rcvbuf": 8192}
    assert row["min_rtt_s"] == pytest.approx(0.0201)
    for later in ("window_full", "events", "limited_by"):
        assert row[later] is None
    json.dumps(row)  # a results-file line
    table = summary_table([row])
    line = table.splitlines()[2]
    assert line.startswith("test_a.py::test_b") and "40 Mbit/s" in line and "50 Mbit/s, 10 ms (RTT 20 ms)" in line
    assert "snd auto→87.04 kB, rcv auto→8.192 kB" in line and "cubic" in line and " - " in line


def test_row_picks_up_later_attributes_and_the_model_prediction(monkeypatch):
    prediction = SimpleNamespace(bps=50e6, bound="rwnd", why="window / RTT")
    monkeypatch.setattr(model, "expected_throughput", lambda result: prediction, raising=False)
    base = _result()
    later = _LaterResult(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    row = flow_row(later, test="t.py::t")
    assert (row["expected_bps"], row["bound"], row["ratio"]) == (50e6, "rwnd", pytest.approx(0.8))
    assert row["limited_by"] == "rwnd" and row["limited_shares"]["rwnd"] == 0.9
    assert row["window_full"] == 12 and row["events"]["retransmission"] == 2 and row["events"]["zero_window"] == 0
    assert row["artifacts"] == ["/tmp/x/flow.pcap", "/tmp/x/tsg.png"]
    assert row["applied_rate"]["runs"] == [[1.3, 0.23, 9.4e6], [2.0, 1.3, 9.6e6]]
    # A row crosses from an xdist worker to its controller, whose serializer refuses a named tuple (CI run 11).
    import execnet

    execnet.dumps(row)
    line = summary_table([row]).splitlines()[2]
    for cell in ("50 Mbit/s (rwnd)", "40 Mbit/s", "0.80", "rwnd", "12"):
        assert cell in line, line
    properties = dict(junit_properties([row]))
    assert properties["tcpnet.flow0.ratio"] == "0.8" and properties["tcpnet.flow0.expected_bps"] == "50000000"
    assert properties["tcpnet.flow0.window_full"] == "12" and properties["tcpnet.flow0.limited_by"] == "rwnd"


def test_a_model_that_cannot_predict_leaves_the_row_without_a_prediction(monkeypatch):
    def refuse(result):
        raise ValueError("no model for this path")

    monkeypatch.setattr(model, "expected_throughput", refuse, raising=False)
    row = flow_row(_result(), test="t.py::t")
    assert row["expected_bps"] is None and row["ratio"] is None and row["measured_bps"] == 40e6


def test_a_window_probe_stands_for_its_transfer():
    transfer = _result()
    probe = WindowProbe(
        window_bytes=65535,
        rcvbuf_requested=32768,
        rcvbuf_effective=65536,
        kernel="6.18.44",
        sysctls={},
        transfer=transfer,
    )
    other = _result(duration_s=4.0)
    rows = flow_rows([transfer, probe, other], test="t.py::t", outcome="failed")
    assert [(r["flow"], r["kind"], r["measured_bps"]) for r in rows] == [
        (0, "window_probe", 40e6),
        (1, "transfer", 20e6),
    ]
    assert rows[0]["advertised_window"] == 65535 and {r["outcome"] for r in rows} == {"failed"}
    assert "advertised window 65.53 kB" in summary_table(rows)
    names = [name for name, _ in junit_properties(rows)]
    assert "tcpnet.flow0.advertised_window" in names and "tcpnet.flow1.measured_bps" in names
    assert not any(name.endswith(".window_full") for name in names)  # missing figures (no capture) are left out


@pytest.mark.parametrize(
    "keep, failed, kept",
    [
        ("failed", True, True),
        ("failed", False, False),
        ("all", False, True),
        ("all", True, True),
        ("none", True, False),
        ("none", False, False),
    ],
)
def test_artifact_retention_follows_keep(tmp_path, keep, failed, kept):
    store = ArtifactStore(tmp_path / "artifacts", keep)
    directory = store.directory_for("tests/test_a.py::test_b[x-1]")
    assert directory.is_dir() and not any(directory.iterdir())
    write_flows(directory, [{"test": "tests/test_a.py::test_b[x-1]"}])
    assert store.finish(directory, failed=failed) is kept
    assert directory.exists() is kept


def test_artifact_directory_is_fresh_each_run_and_empty_ones_go(tmp_path):
    store = ArtifactStore(tmp_path, "all")
    first = store.directory_for("t.py::t")
    (first / "old.png").write_bytes(b"old")
    second = store.directory_for("t.py::t")
    assert second == first and not any(second.iterdir())
    assert store.finish(second, failed=True) is False and not second.exists()
    with pytest.raises(ValueError, match="keep: must be one of failed, all, none"):
        ArtifactStore(tmp_path, "some")


def test_directory_names_are_safe_and_unique():
    assert directory_name("tests/test_a.py::test_b[x-1]") == "tests_test_a.py-test_b[x-1]"
    assert directory_name("t.py::t[../../etc]").count("/") == 0
    long_a, long_b = "t.py::t[" + "a" * 300 + "1]", "t.py::t[" + "a" * 300 + "2]"
    assert len(directory_name(long_a)) <= 120 and directory_name(long_a) != directory_name(long_b)


def _rows_file(path, rows, label=None):
    writer = ResultsWriter(path, label=label)
    writer.write(rows)
    writer.close()
    return path


def test_results_file_round_trip_and_bad_lines(tmp_path):
    rows = flow_rows([_result(), _result(duration_s=1.0)], test="t.py::t", outcome="passed")
    path = _rows_file(tmp_path / "a.jsonl", rows, label="host")
    back = read_rows([path])
    assert [r["measured_bps"] for r in back] == [40e6, 80e6]
    assert back[0]["run"]["label"] == "host" and back[0]["source"] == "a.jsonl"
    assert back[0]["sysctls"]["client"]["net.ipv4.tcp_rmem"] == "4096 4096 4096"
    (tmp_path / "bad.jsonl").write_text(path.read_text() + "{not json\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:3: not a JSON line"):
        read_rows([tmp_path / "bad.jsonl"])
    (tmp_path / "other.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(ValueError, match=r"other.jsonl:1: not a pytest-tcpnet results row"):
        read_rows([tmp_path / "other.jsonl"])
    # A directory that does not exist yet is made (as --junitxml does); a file in its place is refused.
    made = ResultsWriter(tmp_path / "new" / "dir" / "r.jsonl")
    made.close()
    assert (tmp_path / "new" / "dir" / "r.jsonl").is_file()
    (tmp_path / "taken").write_text("a file")
    with pytest.raises(ValueError, match="taken is not a directory"):
        ResultsWriter(tmp_path / "taken" / "r.jsonl")


def test_merge_puts_two_kernels_side_by_side(tmp_path, capsys):
    host = _rows_file(
        tmp_path / "host.jsonl",
        flow_rows([_result(), _result(rcvbuf=16384, duration_s=8.0)], test="t.py::t", outcome="passed"),
    )
    # A second kernel's file: the same flows as a real file of that kernel would hold them, one slower.
    vm_rows = [json.loads(line) for line in host.read_text().splitlines()]
    for row, bps in zip(vm_rows, (30e6, 10e6)):
        row.update(kernel="6.1.0-27-amd64", measured_bps=bps, cc="bbr")  # its default cc differs: same flows still
    vm = tmp_path / "vm.jsonl"
    vm.write_text("".join(json.dumps(r) + "\n" for r in vm_rows))
    comparison = compare(read_rows([host, vm]))
    assert comparison.groups == ["6.18.44", "6.1.0-27-amd64"] and len(comparison.flows) == 2
    table = comparison_table(comparison).splitlines()
    assert "6.18.44: cc" in table[0] and "6.1.0-27-amd64: cc" in table[0]
    assert "cubic" in table[2] and "bbr" in table[2]
    assert "6.1.0-27-amd64 / 6.18.44" in table[0]
    assert "40 Mbit/s" in table[2] and "30 Mbit/s" in table[2] and table[2].endswith("0.75")
    assert "rcv 16.38 kB" in table[3] and "10 Mbit/s" in table[3] and table[3].endswith("1.00")
    assert main(["merge", str(host), str(vm)]) == 0
    out = capsys.readouterr().out
    assert "4 flows from 2 file(s), 2 conditions, 2 kernel(s): 6.18.44, 6.1.0-27-amd64" in out


def test_merge_of_repeated_runs_shows_the_median_and_count(tmp_path, capsys):
    files = [
        _rows_file(tmp_path / f"run{i}.jsonl", flow_rows([_result(duration_s=d)], test="t.py::t"))
        for i, d in enumerate((2.0, 4.0, 1.0))
    ]
    comparison = compare(read_rows(files))
    assert comparison.groups == ["6.18.44"]
    assert "40 Mbit/s (n=3)" in comparison_table(comparison)
    assert main(["merge", *map(str, files), "--by", "source"]) == 0
    assert "3 source(s): run0.jsonl, run1.jsonl, run2.jsonl" in capsys.readouterr().out


def test_merge_command_rejects_bad_input(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["merge", str(tmp_path / "none.jsonl")])
    assert exit_info.value.code == 2 and "does not exist" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["merge", "x.jsonl", "--by", "colour"])
    assert exit_info.value.code == 2
    with pytest.raises(ValueError, match="by: must be one of kernel, source, host, label"):
        compare([], by="colour")


def test_merge_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    path = _rows_file(tmp_path / "a.jsonl", flow_rows([_result(), _result(kernel="6.1")], test="t.py::t"))
    assert main(["merge", str(path), "--plot", str(tmp_path / "plots")]) == 0
    png = tmp_path / "plots" / "comparison.png"
    assert f"plot: {png}" in capsys.readouterr().out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


@dataclasses.dataclass(frozen=True)
class _PlottingResult(TransferResult):
    """A result that can plot, as results will once capture lands (here: writes a stand-in PNG)."""

    def plot(self, directory=None):
        path = Path(directory) / f"tsg-{self.nbytes}.png"
        path.write_bytes(b"\x89PNG\r\n\x1a\n")
        return [path]


@dataclasses.dataclass(frozen=True)
class _UnplottableResult(TransferResult):
    """A result whose plot fails as one without a capture does."""

    def plot(self, directory=None):
        raise RuntimeError("no capture: pass capture=True")


def test_a_failure_gets_each_transfer_plotted_once_and_the_reasons_for_missing_plots(tmp_path):
    from pytest_tcpnet.report.artifacts import explain_failure

    base = _result()
    plotting = _PlottingResult(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    probe = WindowProbe(
        window_bytes=65535,
        rcvbuf_requested=None,
        rcvbuf_effective=65536,
        kernel="6.18.44",
        sysctls={},
        transfer=plotting,
    )

    unplottable = [
        _UnplottableResult(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)}) for _ in "ab"
    ]
    section, images = explain_failure([plotting, probe, *unplottable], tmp_path, test="t.py::t", keep="failed")
    assert images == [tmp_path / "tsg-10000000.png"]
    assert section.splitlines() == [
        f"artifacts (--tcpnet-keep=failed): {tmp_path}",
        "  flows.json",
        "  tsg-10000000.png",
        "no plot: no capture: pass capture=True",
    ]
    assert len(json.loads((tmp_path / "flows.json").read_text())) == 3  # the probe stands for its transfer
    assert explain_failure([], tmp_path / "empty", test="t.py::t", keep="failed") == (None, [])


@pytest.mark.skipif(
    os.geteuid() != 0 or in_user_namespace(),
    reason="handing files to another user needs root in the host's user namespace (as under sudo)",
)
def test_kept_artifacts_go_to_the_user_who_ran_sudo(tmp_path, monkeypatch):
    """Under sudo a kept test directory, its files (a 0600 pcap among them) and the artifacts root become the
    invoking user's, so a CI step uploading them as that user can read them; nothing outside them changes."""
    from pytest_tcpnet.report import ArtifactStore

    monkeypatch.setenv("SUDO_UID", "65534")
    monkeypatch.setenv("SUDO_GID", "65534")
    outside = tmp_path / "outside.txt"
    outside.write_text("not ours")
    store = ArtifactStore(tmp_path / "art", keep="failed")
    path = store.directory_for("t.py::test_x")
    pcap = path / "client.pcap"
    pcap.write_bytes(b"pcap")
    pcap.chmod(0o600)
    assert store.finish(path, failed=True)
    assert {(p.stat().st_uid, p.stat().st_gid) for p in (tmp_path / "art", path, pcap)} == {(65534, 65534)}
    assert outside.stat().st_uid == 0
    # Without sudo's variables nothing changes hands.
    monkeypatch.delenv("SUDO_UID")
    again = store.directory_for("t.py::test_y")
    (again / "flows.json").write_text("[]")
    store.finish(again, failed=True)
    assert (again / "flows.json").stat().st_uid == 0


def test_a_flow_within_the_initial_window_is_not_given_a_rate():
    """A 77-byte request once read "77 B upload in 0 us = 616 Mbit/s" with a ratio of 66321 in the table: a flow that
    fits in one initial window (10 x 1448 B) leaves in one burst, so its row has no rate and says why."""
    tiny = flow_row(fake_result(nbytes=77, duration_s=1e-6, link=Link(rate="20mbit")), test="t.py::t")
    assert tiny["measured_bps"] is None and tiny["ratio"] is None
    assert tiny["notes"] == "too short to judge a rate: 77 B, within one initial window (14480 B)"
    assert "too short to judge a rate" in summary_table([tiny])
    just_over = flow_row(fake_result(nbytes=14_481, duration_s=0.01, link=Link(rate="20mbit")), test="t.py::t")
    assert just_over["measured_bps"] > 0 and just_over["notes"] == ""


def test_a_row_is_made_by_kind_and_an_unknown_kind_is_refused_by_name():
    from pytest_tcpnet.report.rows import result_row

    assert result_row(_result())["kind"] == "transfer"
    with pytest.raises(TypeError, match="no row for a dict: a lab registers only RequestsResult, .*WindowProbe"):
        result_row({"throughput_bps": 1e6})


def test_every_kind_a_lab_registers_has_a_row_builder():
    from pytest_tcpnet.report.rows import _builders
    from pytest_tcpnet.results import REGISTERED_KINDS

    assert sorted(kind.__name__ for kind, _ in _builders()) == sorted(kind.__name__ for kind in REGISTERED_KINDS)


def test_a_flow_s_share_reaches_its_row_and_the_table_notes_say_what_it_is():
    from pytest_tcpnet.model.shares import Share

    ranged = dataclasses.replace(_result(), share=Share(None, "reno flows of different RTTs", 2, 14.2e6, 18.9e6))
    row = flow_row(ranged)
    assert row["share"] == {
        "bps": None,
        "flows": 2,
        "established": False,
        "why": "reno flows of different RTTs",
        "low_bps": 14.2e6,
        "high_bps": 18.9e6,
    }
    assert "shared by 2 flows of different RTTs: share 14.2-18.9 Mbit/s" in summary_table([row])
    unsettled = dataclasses.replace(_result(), share=Share(None, "no established model for bbr beside cubic", 2))
    assert "shared by 2 flows: no established model for the split" in summary_table([flow_row(unsettled)])
