"""Plots and capture series: synthetic packets for the logic, real captures end to end."""

import sys

import pytest

from pytest_tcpnet import Host
from pytest_tcpnet.analysis import plots
from pytest_tcpnet.analysis.series import acked_rate_series, capture_windows, ewma, suggest_interval, time_sequence
from pytest_tcpnet.capture import Capture, CaptureResult, Packet

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _packet(t, direction, seq=1, ack=1, length=0, window=8192, flags="A", expert=(), in_flight=None):
    src, dst = ("10.0.0.2:80", "10.0.0.1:5000") if direction == "data" else ("10.0.0.1:5000", "10.0.0.2:80")
    return Packet(
        time=t,
        stream=0,
        src=src,
        dst=dst,
        direction=direction,
        seq=seq,
        ack=ack,
        window=window,
        peer_window=None,
        len=length,
        bytes_in_flight=in_flight,
        flags=flags,
        expert=tuple(expert),
    )


def _synthetic_flow():
    """Four 1000 B segments, one retransmitted, a zero window, a probe and a window update."""
    return [
        _packet(0.0, "ack", flags="S", ack=0, window=8192),
        _packet(0.5, "data", seq=1, length=1000, in_flight=1000),
        _packet(0.6, "data", seq=1001, length=1000, in_flight=2000, expert=["window_full"]),
        _packet(0.7, "ack", ack=1001, window=0, expert=["zero_window"]),
        _packet(0.9, "data", seq=1000, length=0, expert=["zero_window_probe"]),
        _packet(1.5, "ack", ack=2001, window=4000, expert=["window_update"]),
        _packet(1.6, "data", seq=1001, length=1000, expert=["retransmission"]),
        _packet(1.7, "data", seq=2001, length=1000, in_flight=1000),
        _packet(1.8, "ack", ack=3001, window=4000),
    ]


def test_time_sequence_sorts_segments_and_marks_events():
    ts = time_sequence(_synthetic_flow())
    # Times are from the first data byte (0.5 s), as TCP_INFO series are.
    assert ts.segments == [(0.0, 1, 1001), (pytest.approx(0.1), 1001, 2001), (pytest.approx(1.2), 2001, 3001)]
    assert ts.retransmissions == [(pytest.approx(1.1), 1001, 2001)]
    assert ts.zero_windows == [(pytest.approx(0.2), 1001)]
    assert ts.probes == [(pytest.approx(0.4), 1000)]
    assert ts.window_full == [(pytest.approx(0.1), 2001)]
    assert [edge for _, edge in ts.window_edge] == [1001, 6001, 7001]  # the SYN carries no ACK
    assert [ack for _, ack in ts.acks] == [1001, 2001, 3001]


def test_rate_series_counts_newly_acknowledged_bytes_per_interval():
    rate = acked_rate_series(_synthetic_flow(), interval=0.5)
    # ACKs at 0.2 (1001), 1.0 (2001), 1.3 (3001) s after the first data byte (seq 1).
    assert rate == [(0.5, 1000 * 8 / 0.5), (1.0, 1000 * 8 / 0.5), (1.5, 1000 * 8 / 0.5)]
    with pytest.raises(ValueError, match="interval"):
        acked_rate_series([], 0)


def test_ewma_and_interval_choice():
    assert ewma([(0, 100), (1, 0), (2, 0)], alpha=0.5) == [(0, 100), (1, 50), (2, 25)]
    with pytest.raises(ValueError, match="alpha"):
        ewma([], alpha=0)
    assert [suggest_interval(d) for d in (0.04, 1, 2.5, 25)] == [0.001, 0.02, 0.05, 0.5]


def test_windows_series_from_capture():
    lines = capture_windows(_synthetic_flow())
    assert [w for _, w in lines["advertised window"]] == [0, 4000, 4000]  # the SYN has no ACK flag
    assert [b for _, b in lines["bytes in flight"]] == [1000, 2000, 1000]


def test_plot_functions_write_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    ts = time_sequence(_synthetic_flow())
    paths = [
        plots.plot_time_sequence(ts, tmp_path / "ts.png", title="synthetic"),
        plots.plot_windows(capture_windows(_synthetic_flow()), tmp_path / "w.png", title="synthetic"),
        plots.plot_throughput(
            [(0.5, 8e6), (1.0, 4e6)],
            tmp_path / "tp.png",
            smoothed=[(0.5, 8e6), (1.0, 7e6)],
            predicted_bps=6e6,
            predicted_label="model (rwnd)",
            title="synthetic",
        ),
    ]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC and path.stat().st_size > 10_000


def test_without_matplotlib_plots_say_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    with pytest.raises(plots.PlotsUnavailable, match=r"pytest-tcpnet\[plots\]"):
        plots.plot_time_sequence(time_sequence([]), tmp_path / "x.png")
    assert not list(tmp_path.iterdir())


class _Captured:
    """A transfer result with its capture attached, as transfer(capture=True) will return it."""

    def __init__(self, transfer, capture):
        self._transfer, self.capture = transfer, capture

    def __getattr__(self, name):
        return getattr(self._transfer, name)


@pytest.mark.tcpnet_needs("privilege")
@pytest.mark.tcpnet_needs("tshark")
def test_plot_result_on_a_real_capture(tcpnet, tmp_path):
    pytest.importorskip("matplotlib")
    pair = tcpnet.pair(client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}))
    with Capture(pair.server, directory=tmp_path) as cap:
        transfer = pair.transfer(nbytes=300_000)
    result = _Captured(transfer, cap.result)
    paths = plots.plot_result(result, tmp_path / "plots")
    assert [p.name.rsplit("-", 1)[1] for p in paths] == ["timeseq.png", "windows.png", "throughput.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC
    title = plots.conditions_title(result)
    assert "tcp_rmem=4096 4096 4096" in title and "captured at server/veth-rtr" in title
    # A bare CaptureResult is enough for the capture-based plots.
    assert len(plots.plot_result(CaptureResult(cap.result.pcap, cap.result.point), tmp_path / "bare")) == 3
