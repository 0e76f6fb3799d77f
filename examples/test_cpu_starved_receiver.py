"""C10: a receiver starved of CPU cannot drain its socket: the window closes and the download slows.

Source: a CPU hog pinned to the receiver's core and `nice -n 19 curl`: Recv-Q stayed non-empty,
ZeroWindow and WindowUpdate appeared, the download was slow and unstable.
"""

import pytest

from pytest_tcpnet import Link


def test_a_starved_reader_slows_down_and_its_queue_fills(tcpnet):
    """starve_receiver=True: the reader runs at nice 19 on a core shared with a spinning hog, reading 16 KB at a time.

    Measured on the host (6 runs of 20 MB): unstarved 2.7-4.2 Gbit/s and 0 zero-window
    advertisements; starved 25-39 Mbit/s and 40-545 (the kernel's TcpExt.TCPToZeroWindowAdv
    in the receiver's namespace). Asserted here: starved at most a third as fast, the receive
    queue seen non-empty while starved; zero windows in the VM test below.
    """
    pair = tcpnet.pair()
    normal = pair.transfer(5_000_000)
    starved = pair.transfer(5_000_000, starve_receiver=True)
    assert starved.throughput_bps < normal.throughput_bps / 3, f"{normal.describe()}\n---\n{starved.describe()}"
    # Zero windows are judged in the VM variant below, where no xdist neighbour shares the cores:
    # on the host under -n 2 a starved 5 MB run once advertised none (424 Mbit/s, the other
    # worker's load changed who got the core), while quiet runs showed 16-545 against 0.
    assert max(v for _, v in starved.series("rmem_alloc", side="receiver")) > 0  # Recv-Q held data


@pytest.mark.tcpnet_needs("netem")
def test_a_starved_reader_on_a_delayed_path(tcpnet):
    """The same on a 10 ms path (VM): zero windows appear only when the reader is starved."""
    pair = tcpnet.pair(link=Link(rate="100mbit", rtt="10ms"))
    normal = pair.transfer(3_000_000)
    starved = pair.transfer(3_000_000, starve_receiver=True)
    assert normal.zero_windows_advertised == 0, normal.describe()
    assert starved.zero_windows_advertised >= 1, starved.describe()
    assert starved.throughput_bps < normal.throughput_bps, f"{normal.describe()}\n---\n{starved.describe()}"
