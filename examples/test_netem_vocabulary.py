"""netem's vocabulary as source 001 uses it (need sch_netem): correlated jitter and loss, gap reordering, distributions.

Source 001:
    tc qdisc add dev eth0 root netem delay 100ms 10ms 30%
    tc qdisc add dev eth0 root netem loss 1%
    tc qdisc change dev eth0 root netem delay 100ms 20ms distribution normal
    tc qdisc change dev eth0 root netem gap 5 delay 10ms
    tc qdisc change dev eth0 root netem delay 10ms reorder 25% 50%
Each is a Link here (README, "Link(...)"); the examples check what the kernel holds and what it does.
"""

import statistics

import nodecalls
import pytest

from pytest_tcpnet import GilbertElliott, Link
from pytest_tcpnet.capture import Capture

#: Judged on netem's random draws: CI also runs these in a deterministic session (docs/deterministic.md).
pytestmark = [pytest.mark.tcpnet_needs("privilege", "netem"), pytest.mark.random_loss]


def test_every_correlation_asked_for_is_what_tc_shows_and_what_the_result_reads_back(tcpnet):
    """Source 001: `delay 100ms 10ms 30%`, `loss 1%` (correlated here: `loss 1% 25%`), `delay 10ms reorder 25% 50%`,
    duplicate and corrupt: builds them as one Link; asserts `tc qdisc show` in the router shows each as tc
    would have set it, and every result reads the same values back from the kernel."""
    link = Link(
        delay="100ms",
        jitter="10ms",
        jitter_correlation="30%",
        loss="1%",
        loss_correlation="25%",
        duplicate="1%",
        duplicate_correlation="10%",
        corrupt="0.1%",
        corrupt_correlation="5%",
        to_server={"reorder": "25%", "reorder_correlation": "50%"},
    )
    pair = tcpnet.pair(link=link)
    shown = pair.router.run(["tc", "qdisc", "show"], check=True).stdout
    lines = {
        ifname: next(line for line in shown.splitlines() if "netem" in line and f"dev {ifname} " in line)
        for ifname in ("veth-cli", "veth-srv")
    }
    for ifname, line in lines.items():
        text = " ".join(line.split())
        for words in ("delay 100ms 10ms 30%", "loss 1% 25%", "duplicate 1% 10%", "corrupt 0.1% 5%"):
            assert words in text, f"{words!r} not in {ifname}: {line}"
    assert "reorder 25% 50%" in " ".join(lines["veth-srv"].split()), lines["veth-srv"]
    assert "reorder" not in lines["veth-cli"], lines["veth-cli"]
    # The same, read back over netlink into what every result records (its qdiscs' settings).
    settings = {
        ifname: next(q["settings"] for q in qdiscs if q["kind"] == "netem")
        for ifname, qdiscs in pair.router_qdisc_stats().items()
    }
    expected = dict(
        loss=1.0,
        loss_correlation=25.0,
        jitter_correlation=30.0,
        duplicate=1.0,
        duplicate_correlation=10.0,
        corrupt=0.1,
        corrupt_correlation=5.0,
    )
    for ifname, got in settings.items():
        assert {k: got[k] for k in expected} == pytest.approx(expected, rel=1e-4), (ifname, got)
    assert (settings["veth-srv"]["reorder"], settings["veth-srv"]["reorder_correlation"]) == pytest.approx((25.0, 50.0))
    assert settings["veth-cli"]["reorder"] == 0


def test_gap_5_sends_every_fifth_packet_ahead_of_the_others(tcpnet):
    """Source 001: `gap 5 delay 10ms` ("every fifth packet on time, the others 10 ms late"): captures a 2 MB
    download at the client through Link(delay="10ms", gap=5) toward it; asserts tc shows `reorder 100% gap 5`
    (what tc itself wants for it) and tshark flags 60-85% of the data segments out of order."""
    pair = tcpnet.pair(link=Link(delay="10ms", gap=5, to_server={"gap": None, "reorder": None}))
    line = next(
        line
        for line in pair.router.run(["tc", "qdisc", "show"], check=True).stdout.splitlines()
        if "netem" in line and "dev veth-cli " in line
    )
    assert "reorder 100% gap 5" in " ".join(line.split()), line
    with Capture(pair.client, directory=pair.lab.artifact_dir) as seen_at_client:
        pair.transfer(2_000_000)
    out_of_order = seen_at_client.result.events.get("out_of_order", 0)
    data = seen_at_client.result.data_segments
    # Every fifth data segment overtakes the four queued ahead of it, which then arrive below the highest
    # sequence number seen: tshark flags four in five (measured 1071 of 1401, 76%).
    assert 0.6 * data <= out_of_order <= 0.85 * data, (out_of_order, data)


@pytest.mark.parametrize("distribution", ["uniform", "normal"])
def test_a_distribution_shapes_the_delay_as_its_table_says(tcpnet, distribution):
    """Source 001: `delay 100ms 20ms distribution normal`; here 30 ms ± 5 ms each way, RTTs of UDP echoes.

    Uniform jitter draws each way from ±5 ms: the RTT is 60 ms ± 10 (triangular), never below 50 ms;
    its 5th percentile lies 6.8 ms under the median. The normal table's unit is the jitter (sigma 5 ms
    each way, 7.1 ms for the RTT): its 5th percentile lies 11.6 ms under the median, and 7.9% of the
    RTTs fall more than 10 ms under the median (none for uniform). The guest only adds (its stack 1-2 ms,
    and a scheduling tail of some 6% of the probes up to +70 ms under emulation), so the lower side is
    read, never the upper, and always against the median: beside a CPU hog the guest's stack time
    shifted every RTT up, and "below 50 ms" fell to 1.0% for normal (a fresh-clone CI run) while median
    - p5 still read 13.2 ms. Measured in the 6.1 VM, 5 runs each: median - p5 6.1-7.6 ms (uniform) and
    12.0-14.9 ms (normal; p5 of 400 draws has a standard error of ~0.8 ms). The bounds meet half-way
    between the two (9.5 ms).
    """
    pair = tcpnet.pair(link=Link(delay="30ms", jitter="5ms", distribution=distribution))
    rtts = [rtt for _, rtt in nodecalls.probe_udp(pair) if rtt is not None]
    assert len(rtts) >= 200, len(rtts)  # the guest sometimes loses datagrams of its own (see the loss test)
    p5 = statistics.quantiles(rtts, n=20)[0]
    lower_spread = statistics.median(rtts) - p5
    below = sum(r < statistics.median(rtts) - 0.010 for r in rtts) / len(rtts)
    figures = (
        f"median - p5 {lower_spread * 1e3:.1f} ms, {below:.1%} more than 10 ms under the median "
        f"({statistics.median(rtts) * 1e3:.1f} ms), of {len(rtts)} RTTs"
    )
    if distribution == "uniform":
        assert 0.0050 <= lower_spread <= 0.0095 and min(rtts) >= 0.0498, figures
    else:
        # 7.9% expected; 2% is 4 standard errors of a 400-draw share under that.
        assert 0.0095 <= lower_spread <= 0.0170 and below >= 0.02, figures


def test_gilbert_elliott_loses_in_bursts(tcpnet):
    """Source 001's `loss 1%`, correlated (losses in bursts, as on a real path): loss on the way to the server only,
    a Gilbert-Elliott chain (p 5%, r 25%): a mean of 16.7% lost in bursts
    of 1/r = 4 datagrams on average; independent losses at that rate come in runs of 1/(1 - 0.167) = 1.2.
    4000 datagrams 2 ms apart, counted where they arrive (the server). The chain's own spread over 4000 datagrams
    (3000 simulated chains): 16.7% +- 1.4% lost, runs of 4.01 +- 0.26; the bounds (>= 10%, runs >= 2.5) sit 4.7 and
    5.8 standard deviations below, under the 0.1% quantiles (12.4%, 3.25). With 1000 datagrams the spread was twice
    that and a fresh-clone CI run beside a CPU hog read 9.0% lost in 27 runs of 3.33 (a draw below 10% in 0.5% of
    runs).

    Measured in the 6.1 VM (1000 datagrams): 15.0-20.3% lost in runs of 3.8-4.3 (5 sessions); under UML 6.1 and
    6.12 (4000): 13.0-16.1% in runs of 3.45-4.09 (6 runs), and it passes in the deterministic session. The guest also loses some
    datagrams of its own at this rate (in 3 of 8 sessions 10-45% more, in runs of 2-10, with netem's
    independent loss as well: not diagnosed), which only adds losses and lengthens runs; so the bounds are
    one-sided, and what the kernel holds is read from `tc qdisc show`.
    """
    pair = tcpnet.pair(link=Link(to_server={"loss": GilbertElliott(p="5%", r="25%")}))
    line = next(
        line
        for line in pair.router.run(["tc", "qdisc", "show"], check=True).stdout.splitlines()
        if "netem" in line and "dev veth-srv " in line
    )
    assert "loss gemodel p 5% r 25% 1-h 100% 1-k 0%" in " ".join(line.split()), line
    datagrams = 4000
    arrived = nodecalls.probe_udp(pair, count=datagrams, interval=0.002, arrived=True)
    lost = [n not in arrived for n in range(datagrams)]
    runs, run = [], 0
    for gone in lost + [False]:
        if gone:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    share, mean_run = sum(lost) / len(lost), statistics.mean(runs)
    figures = f"{share:.1%} lost in {len(runs)} runs of {mean_run:.2f} on average"
    assert share >= 0.10 and mean_run >= 2.5, figures
