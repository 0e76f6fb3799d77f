"""C10: a receiver starved of CPU cannot drain its socket: the window closes and the download slows.

Source: a CPU hog pinned to the receiver's core and `nice -n 19 curl`: Recv-Q stayed non-empty,
ZeroWindow and WindowUpdate appeared, the download was slow and unstable.
"""

import pytest

from pytest_tcpnet import Link
from pytest_tcpnet.analysis.limits import chrono_shares


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
    """The same on a 10 ms path (VM): the starved reader's window closes and holds its sender most of the time; the
    unstarved reader's does not.

    Measured under UML 6.1 and 6.12, two guests side by side: 16 runs (8 of them beside a CPU hog on both host
    cores) and 8 from fresh-clone CI runs. Starved: 1-2 zero windows advertised, the window holding the sender
    0.76-0.93 of its busy time. Unstarved: 0.00-0.20, and 0.33 once beside a hog, when the host starved the guest's
    unstarved reader too and it advertised a zero window (so the unstarved reader's zero windows are not judged). The
    starved download was slower in every run, but in a one-CPU guest it sometimes keeps up (85-87 Mbit/s against
    88-93 unstarved, 3 of 24 runs), so the pace is judged by who held the sender: over half the time for the
    starved reader, under half for the unstarved one.
    """
    pair = tcpnet.pair(link=Link(rate="100mbit", rtt="10ms"))
    normal = pair.transfer(3_000_000)
    starved = pair.transfer(3_000_000, starve_receiver=True)
    both = f"{normal.describe()}\n---\n{starved.describe()}"
    assert starved.zero_windows_advertised >= 1, both
    # The share of the sender's busy time the receiver's window held it (TCP_INFO rwnd_limited / busy_time).
    held = {
        name: chrono_shares(result.sender_tcp_info)["rwnd"]
        for name, result in (("normal", normal), ("starved", starved))
    }
    assert held["starved"] > 0.5 > held["normal"], (held, both)
