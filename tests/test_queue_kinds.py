"""Every queue discipline and the policer on a real kernel (the pinned-kernel VM has them; this host does not).

Each kind is built as the lab builds it, read back from the kernel (our decoder and `tc -d qdisc
show`), and carries a flow at the link's rate; a queue after netem's delay line adds its own
delay to the path's RTT.
"""

import pytest

from pytest_tcpnet import Flow, Host, Link

KINDS = {
    "pfifo": dict(limit=100),
    "bfifo": dict(limit="150kb"),
    "fq_codel": dict(limit=800, ecn=True, queue_options={"target": "4ms", "interval": "80ms", "flows": 128}),
    "codel": dict(limit=600, ecn=False, queue_options={"target": "6ms"}),
    "pie": dict(limit=700, ecn=True, queue_options={"target": "10ms", "tupdate": "20ms"}),
    "fq_pie": dict(limit=900, queue_options={"flows": 256, "target": "12ms", "ecn_prob": "20%"}),
    # rtt 200 ms: cake targets rtt/20 (10 ms here); at rtt 40 ms (2 ms) a cubic flow on a 20 ms path kept its
    # window under the BDP after each drop and carried 0.78 of the rate (6.1 VM, quiet).
    "cake": dict(queue_options={"rtt": "200ms", "flow_mode": "flows", "diffserv": "besteffort"}),
    "red": dict(limit="300kb", queue_options={"min": "30kb", "max": "90kb"}),
    "fq": dict(limit=5000, queue_options={"flow_limit": 200, "pacing": False}),
}


@pytest.mark.parametrize(
    "kind", [pytest.param(kind, marks=pytest.mark.tcpnet_needs("privilege", "netem", kind)) for kind in KINDS]
)
def test_each_queue_is_built_as_asked_and_carries_the_link_s_rate(tcpnet, kind):
    """Builds a 20 Mbit/s, 20 ms link whose queue is `kind` (after netem's delay line) with options; asserts the
    kernel holds those options (read back by netlink, and named by tc) and a 3 s download carries >= 85% of the
    payload rate through it. With no delay the path's BDP is a few packets and an AQM's drops leave a cubic
    flow short of the rate: fq_pie and cake carried 0.83-0.84 of it at 0 ms beside a CPU hog (CI run ci32)."""
    link = Link(rate="20mbit", rtt="20ms", queue=kind, **KINDS[kind])
    pair = tcpnet.pair(link)
    queue = link.toward_client.queue
    leaf = next(q for q in pair.router_qdisc_stats()["veth-cli"] if q["kind"] == kind)
    asked = dict(queue.options)
    asked.pop("bandwidth", None)  # red's idle damping input: tc computes with it but the kernel keeps none
    asked.pop("avpkt", None)
    if queue.limit is not None:
        asked["limit"] = queue.limit
    if queue.ecn is not None:
        asked["ecn"] = queue.ecn
    held = {name: value for name, value in leaf["settings"].items() if name in asked}
    # Times come back in the kernel's own units: codel keeps ns >> 10 (1.024 us), so 4 ms reads 3.999 ms.
    assert held == pytest.approx(asked, abs=2e-6), (kind, leaf["settings"])
    shown = pair.router.run(["tc", "-d", "qdisc", "show", "dev", "veth-cli"], check=True).stdout
    assert f"qdisc {kind} " in shown, shown
    result = pair.transfer(duration=3.0)
    assert result.throughput_bps >= 0.85 * 20e6 * 1448 / 1514, result.describe()


@pytest.mark.tcpnet_needs("privilege", "netem", "cubic")
def test_a_queue_after_the_delay_line_adds_its_delay_to_the_path_s_rtt(tcpnet):
    """pfifo of 60 packets after netem's 40 ms at 10 Mbit/s: a cubic flow keeps it full, so a probe's RTT under
    load is the base RTT plus up to 60 x 1514 B at 10 Mbit/s (72.7 ms): between 40 + 0.6 x 72.7 and 40 + 72.7 +
    a few ms at p95; the tree is htb -> netem -> pfifo, as `tc qdisc show` says."""
    pair = tcpnet.pair(Link(rate="10mbit", rtt="40ms", queue="pfifo", limit=60), server=Host(cc="cubic"))
    shown = pair.router.run(["tc", "qdisc", "show", "dev", "veth-cli"], check=True).stdout
    assert "qdisc netem 10: parent 1:1" in shown and "qdisc pfifo 8010: parent 10:1 limit 60p" in shown, shown
    result = pair.latency_under_load(duration=6, flows=[Flow(duration=6, cc="cubic")], idle=1.0)
    queue_s = 60 * 1514 * 8 / 10e6
    figures = result.describe()
    assert 0.040 <= result.idle_rtt_s <= 0.046, figures
    assert 0.6 * queue_s <= result.induced_latency_s(95, after=1.0) <= queue_s + 0.006, figures


@pytest.mark.tcpnet_needs("privilege", "police")
def test_a_policer_drops_above_its_rate_and_queues_nothing(tcpnet):
    """A 20 Mbit/s policer with a 30 KB bucket and no shaper: tc shows the police action on a match-all filter, a
    download gets through at most the police rate (plus what the bucket lets burst) and the drops are counted."""
    pair = tcpnet.pair(Link(police="20mbit", burst="30kb"))
    shown = pair.router.run(["tc", "filter", "show", "dev", "veth-cli"], check=True).stdout
    assert "police" in shown and "rate 20Mbit" in shown and "burst 30Kb" in shown.replace("30720b", "30Kb"), shown
    result = pair.transfer(duration=3.0)
    assert result.emulator_drops > 0, result.describe()
    assert result.throughput_bps <= 20e6 * 1.05, result.describe()
