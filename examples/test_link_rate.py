"""C5: a rate-only link (htb, no delay) is filled to its rate. Runs on any kernel with htb (no netem).

Source figure: htb rate 1000 mbit, no delay: 118 MB/s, the line rate less headers.
"""

import pytest

from pytest_tcpnet import Link, assert_limited_by, assert_throughput_within, model


@pytest.mark.tcpnet_needs("htb")
@pytest.mark.parametrize("rate", ["50mbit", "500mbit"])
def test_link_rate(tcpnet, rate):
    """C5 (source: 1000 mbit -> 118 MB/s): measures a 0.8 s bulk download over an htb-shaped link;
    asserts the goodput is the model's link bound (1448 payload bytes per 1514-byte frame) within ±8%
    in a majority of up to 3 trials, and that the sender was cwnd/path-limited, not window- or buffer-limited."""
    link = Link(rate=rate)
    nbytes = int(link.rate_bps / 8 * 0.8)  # ~0.8 s at line rate: long enough that start-up is < 2%
    pair = tcpnet.pair(link=link)
    # ±8%, majority of 3 trials: measured on the host, 10 runs each, goodput / model was
    # 0.995-1.001 at 50 mbit and 0.922-1.002 at 500 mbit (one slow outlier in ten there).
    result = assert_throughput_within(lambda: pair.transfer(nbytes=nbytes), rel=0.08, trials=3)
    assert model.expected_throughput(result).bound == "link"
    assert_limited_by(result, "cwnd")
