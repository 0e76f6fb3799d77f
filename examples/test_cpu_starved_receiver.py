"""C10: a receiver starved of CPU cannot drain its socket: the window closes and the download slows.

Source: a CPU hog pinned to the receiver's core and `nice -n 19 curl`: Recv-Q stayed non-empty,
ZeroWindow and WindowUpdate appeared, the download was slow and unstable.
"""

import pytest

from pytest_tcpnet import Link
from pytest_tcpnet.model import expected_throughput


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
    """The same on a 10 ms path (VM): the starved reader's window closes and holds its sender longer than the path
    needs to carry the whole transfer; the unstarved reader's holds it for less.

    How long a reader at nice 19 beside a spinning hog waits for the CPU is the guest scheduler's choice (CFS in
    6.1, EEVDF in 6.12), so it is judged against the path, by a majority of up to three pairs of downloads.
    Measured under UML 6.1 and 6.12, two guests side by side, 3 MB each (the path needs 274-283 ms by the model):
    12 runs quiet, 16 beside a CPU hog on both host cores, and one CI run. Starved: 1-2 zero windows advertised
    in every run, the window holding the sender 440-7450 ms (440 once, in CI; otherwise 600 or more). Unstarved:
    0-110 ms (the highest beside the hog), and once, in an earlier CI run beside a hog, a zero window when the
    host starved the guest's unstarved reader too (so the unstarved reader's zero windows are not judged). The
    share of the sender's busy time the window held it (0.46-0.93 starved, 0.00-0.33 unstarved) is not judged:
    a starved reader that starts reading late holds the sender seconds before its first read, one that starts at
    once and keeps up in bursts can hold it under half the time (the CI run: 440 of 950 ms).
    """
    pair = tcpnet.pair(link=Link(rate="100mbit", rtt="10ms"))
    verdicts, figures = [], []
    while verdicts.count(True) < 2 and verdicts.count(False) < 2:
        normal = pair.transfer(3_000_000)
        starved = pair.transfer(3_000_000, starve_receiver=True)
        both = f"{normal.describe()}\n---\n{starved.describe()}"
        assert starved.zero_windows_advertised >= 1, both
        # The time the path needs to carry the transfer, and how long each receiver's window held its sender
        # (the sender's TCP_INFO rwnd_limited, microseconds).
        path_s = normal.nbytes * 8 / expected_throughput(normal).bps
        held = {name: r.sender_tcp_info["rwnd_limited"] / 1e6 for name, r in (("normal", normal), ("starved", starved))}
        verdicts.append(held["starved"] > path_s > held["normal"])
        figures.append(
            f"trial {len(verdicts)}: the window held the starved reader's sender {held['starved'] * 1e3:.0f} ms, "
            f"the unstarved one's {held['normal'] * 1e3:.0f} ms; the path needs {path_s * 1e3:.0f} ms"
        )
    assert verdicts.count(True) >= 2, "\n".join(figures) + f"\n{both}"
