"""Does capturing change what it measures? Goodput with and without a capture, side by side.

Run as root, holding the shared timing lock:
    flock /tmp/tcpnet-dev-vm.lock python3 benchmarks/bench_capture.py [rounds]
At 100 Mbit/s (htb) and unshaped (the highest rate a veth path carries here), transfers with
and without a Capture on the sender's interface are interleaved so machine noise hits both
alike; medians, their ratio and the capture's own drop count are printed.
"""

import statistics
import sys
import tempfile

from pytest_tcpnet import Lab, Link
from pytest_tcpnet.capture import Capture

CASES = (("100 Mbit/s", Link(rate="100mbit"), 12_000_000), ("unshaped", Link(), 200_000_000))


def goodput(pair, nbytes, directory=None):
    """(goodput bit/s, packets dumpcap dropped or None) of one download, captured when directory is given."""
    if directory is None:
        return pair.transfer(nbytes=nbytes).throughput_bps, None
    with Capture(pair.server, directory=directory) as cap:
        result = pair.transfer(nbytes=nbytes)
    cap.result.pcap.unlink()
    return result.throughput_bps, cap.result.dropped


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with Lab() as lab, tempfile.TemporaryDirectory(prefix="bench-capture-") as directory:
        for label, link, nbytes in CASES:
            pair = lab.pair(link=link)
            goodput(pair, nbytes // 4)  # warm-up
            plain, captured, drops = [], [], []
            for _ in range(rounds):
                plain.append(goodput(pair, nbytes)[0])
                bps, dropped = goodput(pair, nbytes, directory)
                captured.append(bps)
                drops.append(dropped)
            a, b = statistics.median(plain), statistics.median(captured)
            print(
                f"{label:>10}: without capture {a / 1e6:8.1f} Mbit/s, with capture {b / 1e6:8.1f} Mbit/s, "
                f"ratio {b / a:.3f} (median of {rounds}; spread without {min(plain) / 1e6:.0f}-"
                f"{max(plain) / 1e6:.0f}, with {min(captured) / 1e6:.0f}-{max(captured) / 1e6:.0f}); "
                f"capture drops {drops}"
            )


if __name__ == "__main__":
    main()
