"""C14: a receiver that stops reading closes the window; the sender probes it; reading resumes the flow.

Source: the app stops reading, Recv-Q fills, the receiver advertises ZeroWindow, the sender sends
zero-window probes, and a WindowUpdate restarts the transfer when the app reads again.
Runs on both kernels.
"""

import pytest

from pytest_tcpnet import Pause

pytestmark = pytest.mark.kernel_comparison


def test_a_pausing_reader_closes_the_window_and_the_flow_resumes(tcpnet):
    """A reader pauses 1 s after 1 MB of 20 MB: zero window seen by the sender, probes sent, every byte arrives.

    Measured on the host: 83 snd_wnd == 0 samples, TCPToZeroWindowAdv 1, TCPWinProbe 2.
    """
    result = tcpnet.pair().transfer(20_000_000, reader=Pause(after=1_000_000, seconds=1.0))
    assert result.nbytes == 20_000_000
    (paused_at, resumed_at), = result.receiver["pauses"]
    closed = [t for t, wnd in result.series("snd_wnd") if wnd == 0]
    assert closed, result.describe()
    assert result.zero_windows_advertised >= 1
    assert result.counter("TcpExt.TCPWinProbe", side="sender") >= 1  # the persist timer's probes
    # The window reopened when the reader came back: data kept arriving after the pause.
    assert result.receiver["last_byte_at"] > resumed_at
