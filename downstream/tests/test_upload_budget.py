"""The upload budget holds on real (emulated) links: what a user's project tests with pytest-tcpnet."""

import pytest
from pytest_tcpnet import Link

from upload_budget import upload_budget_s

NBYTES = 5_000_000


@pytest.mark.tcpnet_needs("privilege", "htb")
def test_upload_fits_its_budget_on_a_50mbit_link(tcpnet):
    pair = tcpnet.pair(link=Link(rate="50mbit"))
    result = pair.transfer(NBYTES, direction="upload")
    # htb delivers 95-96% of the rate as goodput here (1448 payload bytes per 1514-byte frame),
    # so the 90% budget holds with room, and nothing beats the link itself.
    assert result.duration_s <= upload_budget_s(NBYTES, 50e6), result.describe()
    assert result.throughput_bps <= 50e6, result.describe()


@pytest.mark.tcpnet_needs("privilege", "netem")
def test_a_40ms_path_costs_at_least_its_round_trip(tcpnet):
    pair = tcpnet.pair(link=Link(rate="50mbit", rtt="40ms"))
    result = pair.transfer(NBYTES, direction="upload")
    assert result.min_rtt_s >= 0.040, result.describe()
    assert result.duration_s >= 0.040, result.describe()


def test_budget_rejects_nonsense():
    with pytest.raises(ValueError, match="rate_bps > 0"):
        upload_budget_s(1, 0)
