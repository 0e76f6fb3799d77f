"""netem's vocabulary beyond delay and loss (source 001's commands): correlations, gap, distributions (need sch_netem)."""

import statistics
import time

import pytest

from pytest_tcpnet import Link
from pytest_tcpnet.capture import Capture

import nodecalls

pytestmark = pytest.mark.tcpnet_needs("privilege", "netem")


def test_every_correlation_asked_for_is_what_tc_shows_and_what_the_result_reads_back(tcpnet):
    # Source 001: `delay 100ms 10ms 30%`, `loss 1%` (correlated here), `reorder 25% 50%`, duplicate and corrupt.
    link = Link(delay="100ms", jitter="10ms", jitter_correlation="30%", loss="1%", loss_correlation="25%",
                duplicate="1%", duplicate_correlation="10%", corrupt="0.1%", corrupt_correlation="5%",
                to_server={"reorder": "25%", "reorder_correlation": "50%"})
    pair = tcpnet.pair(link=link)
    shown = pair.router.run(["tc", "qdisc", "show"], check=True).stdout
    lines = {ifname: next(line for line in shown.splitlines() if "netem" in line and f"dev {ifname} " in line)
             for ifname in ("veth-cli", "veth-srv")}
    for ifname, line in lines.items():
        text = " ".join(line.split())
        for words in ("delay 100ms 10ms 30%", "loss 1% 25%", "duplicate 1% 10%", "corrupt 0.1% 5%"):
            assert words in text, f"{words!r} not in {ifname}: {line}"
    assert "reorder 25% 50%" in " ".join(lines["veth-srv"].split()), lines["veth-srv"]
    assert "reorder" not in lines["veth-cli"], lines["veth-cli"]
    # The same, read back over netlink into what every result records (its qdiscs' settings).
    settings = {ifname: next(q["settings"] for q in qdiscs if q["kind"] == "netem")
                for ifname, qdiscs in pair.router_qdisc_stats().items()}
    expected = dict(loss=1.0, loss_correlation=25.0, jitter_correlation=30.0, duplicate=1.0,
                    duplicate_correlation=10.0, corrupt=0.1, corrupt_correlation=5.0)
    for ifname, got in settings.items():
        assert {k: got[k] for k in expected} == pytest.approx(expected, rel=1e-4), (ifname, got)
    assert (settings["veth-srv"]["reorder"], settings["veth-srv"]["reorder_correlation"]) == pytest.approx((25.0, 50.0))
    assert settings["veth-cli"]["reorder"] == 0


def test_gap_5_sends_every_fifth_packet_ahead_of_the_others(tcpnet):
    # Source 001: `gap 5 delay 10ms` ("every fifth packet on time, the others 10 ms late"); tc itself wants
    # `reorder 100% gap 5` for it, which is what Link(gap=5) installs.
    pair = tcpnet.pair(link=Link(delay="10ms", gap=5, to_server={"gap": None, "reorder": None}))
    line = next(line for line in pair.router.run(["tc", "qdisc", "show"], check=True).stdout.splitlines()
                if "netem" in line and "dev veth-cli " in line)
    assert "reorder 100% gap 5" in " ".join(line.split()), line
    with Capture(pair.client, directory=pair.lab.artifact_dir) as seen_at_client:
        pair.transfer(2_000_000)
    out_of_order = seen_at_client.result.events.get("out_of_order", 0)
    data = seen_at_client.result.data_segments
    # Every fifth data segment overtakes the four queued ahead of it, which then arrive below the highest
    # sequence number seen: tshark flags four in five (measured 1071 of 1401, 76%).
    assert 0.6 * data <= out_of_order <= 0.85 * data, (out_of_order, data)


def _udp_rtts(pair, count=400, interval=0.003):
    """RTTs of UDP echoes from the client to the server: the delay line's own spread (processes of their own, so no
    GIL between the probe's clock and its socket)."""
    echo = pair.server.spawn(nodecalls.udp_echo, pair.server.address, 9300)
    time.sleep(0.05)
    rtts = pair.client.spawn(nodecalls.udp_rtts, pair.server.address, 9300, count, interval).result(timeout=30)
    echo.result(timeout=10)
    return rtts


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_a_distribution_shapes_the_delay_as_its_table_says(tcpnet, distribution):
    """Source 001: `delay 100ms 20ms distribution normal`; here 30 ms ± 5 ms each way, RTTs of UDP echoes.

    Uniform jitter draws each way from ±5 ms: the RTT is 60 ms ± 10 (triangular), never below 50 ms;
    its 5th percentile lies 6.8 ms under the median. The normal table's unit is the jitter (sigma 5 ms
    each way, 7.1 ms for the RTT): its 5th percentile lies 11.6 ms under the median, and 7.9% of the
    RTTs fall below 50 ms. The guest only adds (its stack 1-2 ms, and a scheduling tail of some 6% of
    the probes up to +70 ms under emulation), so the lower side is read, never the upper. Measured in
    the 6.1 VM, 5 runs each: median - p5 6.1-7.6 ms (uniform) and 12.0-14.9 ms (normal; p5 of 400
    draws has a standard error of ~0.8 ms); below 50 ms none (uniform), 4-8% (normal). The bounds
    meet half-way between the two (9.5 ms).
    """
    pair = tcpnet.pair(link=Link(delay="30ms", jitter="5ms", distribution=distribution))
    rtts = _udp_rtts(pair)
    assert len(rtts) >= 390, len(rtts)
    p5 = statistics.quantiles(rtts, n=20)[0]
    lower_spread = statistics.median(rtts) - p5
    below = sum(r < 0.050 for r in rtts) / len(rtts)
    figures = f"median - p5 {lower_spread * 1e3:.1f} ms, {below:.1%} below 50 ms, of {len(rtts)} RTTs"
    if distribution == "uniform":
        assert 0.0050 <= lower_spread <= 0.0095 and min(rtts) >= 0.0498, figures
    else:
        assert 0.0095 <= lower_spread <= 0.0170 and below >= 0.02, figures
