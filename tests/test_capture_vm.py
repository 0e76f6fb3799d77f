"""Plots of real flows under netem (run in the VM): C1's window-per-RTT staircase, C11's small SO_SNDBUF."""

import importlib.util

import pytest

from pytest_tcpnet import Capture, Host, Link
from pytest_tcpnet.analysis import plots
from pytest_tcpnet.analysis.series import time_sequence

pytestmark = pytest.mark.tcpnet_needs("privilege", "netem", "tshark")


class _Captured:
    """A transfer result with its capture attached, as transfer(capture=True) will return it."""

    def __init__(self, transfer, capture):
        self._transfer, self.capture = transfer, capture

    def __getattr__(self, name):
        return getattr(self._transfer, name)


def _needs_matplotlib():
    # Not importorskip: importing matplotlib takes seconds under emulation, and the host draws the plots.
    if importlib.util.find_spec("matplotlib") is None:
        pytest.skip("plots need matplotlib: pip install 'pytest-tcpnet[plots]'")


def _rounds(ts, rtt_s):
    """Bursts of data segments separated by gaps of at least half an RTT: one per round trip."""
    times = [t for t, _, _ in ts.segments]
    return 1 + sum(1 for a, b in zip(times, times[1:]) if b - a >= rtt_s / 2)


def test_c1_tiny_receive_buffer_time_sequence(tcpnet, tmp_path):
    _needs_matplotlib()
    pair = tcpnet.pair(link=Link(rtt="10ms"), client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}))
    with Capture(pair.server, directory=tmp_path) as cap:
        transfer = pair.transfer(nbytes=60_000)
    paths = plots.plot_result(_Captured(transfer, cap.result), tmp_path)
    assert len(paths) == 3
    ts = time_sequence(cap.result.packets)
    # The staircase: the receive-window edge never runs more than the tiny buffer ahead of the ACKs,
    # and the flow moves in round trips (measured in the 6.1 VM: ~1.5 KB per ~11 ms step).
    assert max(edge - ack for (_, edge), (_, ack) in zip(ts.window_edge, ts.acks)) <= 4096
    assert _rounds(ts, 0.010) >= 60_000 / 4096


def test_c11_small_sndbuf_time_sequence(tcpnet, tmp_path):
    _needs_matplotlib()
    pair = tcpnet.pair(link=Link(rate="100mbit", rtt="20ms"))
    with Capture(pair.server, directory=tmp_path) as cap:
        transfer = pair.transfer(nbytes=400_000, sndbuf=16384)
    paths = plots.plot_result(_Captured(transfer, cap.result), tmp_path)
    assert len(paths) == 3
    ts = time_sequence(cap.result.packets)
    # The 20 ms plateaus: the sender sends a burst, then waits a round trip for ACKs.
    assert _rounds(ts, 0.020) >= 4
    in_flight = max(p.bytes_in_flight or 0 for p in cap.result.packets)
    # What the 6.1 kernel really does (measured: 170 KB in flight with SO_SNDBUF 16384 -> 32768):
    # the flight is not capped at the send buffer; it grows round by round as in slow start.
    print(
        f"C11: effective SO_SNDBUF {transfer.sender['buffers']['sndbuf']} B, max bytes in flight {in_flight} B, "
        f"{_rounds(ts, 0.020)} rounds, plots {[str(p) for p in paths]}"
    )
