"""C14: a receiver that stops reading closes the window; the sender probes it; reading resumes the flow.

Source: the app stops reading, Recv-Q fills, the receiver advertises ZeroWindow, the sender sends
zero-window probes, and a WindowUpdate restarts the transfer when the app reads again.
Runs on both kernels.
"""

import pytest

from pytest_tcpnet import Pause, assert_zero_window

pytestmark = [pytest.mark.kernel_comparison, pytest.mark.tcpnet_needs("tshark")]


def test_a_pausing_reader_closes_the_window_and_the_flow_resumes(tcpnet):
    """The reader pauses 1 s after 500 kB of 3 MB, with SO_RCVBUF 256 KB (a fixed buffer fills at once).

    Measured on the host (3 runs, identical): in the capture 2 ZeroWindow, 2 zero-window probes
    (the persist timer's), 1 window update; the kernel counted 1 TCPToZeroWindowAdv and 2
    TCPWinProbe; ~90 sampled snd_wnd == 0. Asserted: at least one of each, every byte arrives,
    data flows again after the pause.
    """
    result = tcpnet.pair().transfer(3_000_000, rcvbuf=262144, reader=Pause(after=500_000, seconds=1.0), capture=True)
    assert result.nbytes == 3_000_000
    assert_zero_window(result)
    assert result.events["zero_window_probe"] >= 1, result.events  # 1 s outlasts the first persist timeout
    assert result.events["window_update"] >= 1, result.events
    assert result.zero_windows_advertised >= 1
    assert result.counter("TcpExt.TCPWinProbe", side="sender") >= 1
    assert any(wnd == 0 for _, wnd in result.series("snd_wnd"))
    ((paused_at, resumed_at),) = result.receiver.pauses
    assert result.receiver.last_byte_at > resumed_at  # the window reopened and data kept coming
