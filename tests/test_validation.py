"""Bad input is refused before anything is created, with a message naming the field and what is allowed."""

import struct

import pytest
from refusals import assert_refused

from pytest_tcpnet import GilbertElliott, Host, Link, Slot, netlink

# (constructor kwargs, exception type, words the message must contain)
BAD_LINKS = [
    (dict(loss=1.2), ValueError, ["loss", "0..1"]),
    (dict(loss="120%"), ValueError, ["loss", "0..1"]),
    (dict(loss=-0.1), ValueError, ["loss", "0..1"]),
    (dict(rtt="-5ms"), ValueError, ["rtt", ">= 0"]),
    (dict(delay=-0.001), ValueError, ["delay", ">= 0"]),
    (dict(rate=0), ValueError, ["rate", "> 0"]),
    (dict(rate="-10mbit"), ValueError, ["rate", "> 0"]),
    (dict(rate="100 furlongs"), ValueError, ["rate", "unknown unit", "mbit"]),
    (dict(rtt="20 parsecs"), ValueError, ["rtt", "unknown unit", "ms"]),
    (dict(rtt="fast"), ValueError, ["rtt", "cannot parse"]),
    (dict(jitter="1ms"), ValueError, ["jitter", "needs a delay"]),
    (dict(reorder="25%"), ValueError, ["reorder", "needs a delay"]),
    (dict(rtt="10ms", jitter="6ms"), ValueError, ["jitter", "must not exceed"]),
    (dict(rtt="20ms", delay="10ms"), ValueError, ["rtt/delay", "not both"]),
    (dict(duplicate=2), ValueError, ["duplicate", "0..1"]),
    (dict(corrupt="150%"), ValueError, ["corrupt", "0..1"]),
    (dict(limit=0), ValueError, ["limit", ">= 1"]),
    (dict(limit=-5), ValueError, ["limit", ">= 1"]),
    (dict(limit=2.5), TypeError, ["limit", "packet count"]),
    (dict(loss=True), TypeError, ["loss", "number"]),
    (dict(rate=float("nan")), ValueError, ["rate", "finite"]),
    (dict(rtt=float("inf")), ValueError, ["rtt", "finite"]),
    (dict(rtt="2h"), ValueError, ["rtt", "unknown unit"]),
    (dict(delay=7200), ValueError, ["delay", "at most 1 hour"]),
    (dict(rate="500gbit"), ValueError, ["rate", "400 Gbit/s"]),
    (dict(to_client={"lost": 0.1}), ValueError, ["to_client", "unknown field", "loss"]),
    (dict(to_server={"loss": 3}), ValueError, ["to_server.loss", "0..1"]),
    (dict(to_client="fast"), TypeError, ["to_client", "dict"]),
    (dict(rtt=[20]), TypeError, ["rtt", "number"]),
    # netem's knobs (issue 20): each names its field and what it needs.
    (dict(rtt="20ms", jitter_correlation="30%"), ValueError, ["jitter_correlation", "needs jitter"]),
    (dict(rtt="20ms", loss_correlation="25%"), ValueError, ["loss_correlation", "needs loss"]),
    (dict(rtt="20ms", reorder_correlation="50%"), ValueError, ["reorder_correlation", "needs reorder"]),
    (dict(duplicate_correlation=0.1), ValueError, ["duplicate_correlation", "needs duplicate"]),
    (dict(corrupt_correlation=0.1), ValueError, ["corrupt_correlation", "needs corrupt"]),
    (dict(rtt="20ms", loss="1%", loss_correlation="130%"), ValueError, ["loss_correlation", "0..1"]),
    (dict(rtt="20ms", jitter="1ms", jitter_correlation=-0.2), ValueError, ["jitter_correlation", "0..1"]),
    (dict(gap=5), ValueError, ["gap", "needs a delay"]),
    (dict(rtt="20ms", gap=0), ValueError, ["gap", ">= 1"]),
    (dict(rtt="20ms", gap=2.5), ValueError, ["gap", "whole number"]),
    (dict(rtt="20ms", gap=True), ValueError, ["gap", "whole number"]),
    (dict(rtt="20ms", jitter="1ms", distribution="weibull"), ValueError, ["distribution", "normal, pareto"]),
    (dict(rtt="20ms", distribution="normal"), ValueError, ["distribution", "needs jitter"]),
    (dict(to_server={"gap": 3}), ValueError, ["to_server.gap", "needs a delay"]),
    (dict(slot="5ms"), TypeError, ["slot", "Slot("]),
    (dict(loss=GilbertElliott(p=0.01, r=0.2), loss_correlation="20%"), ValueError, ["loss_correlation", "bursts"]),
]
BAD_MODELS = [
    (lambda: GilbertElliott(p="1%", r=0), ValueError, ["loss.r", "> 0"]),
    (lambda: GilbertElliott(p="120%", r="10%"), ValueError, ["loss.p", "0..1"]),
    (lambda: GilbertElliott(p=0.01, r=0.1, bad_loss=-1), ValueError, ["loss.bad_loss", "0..1"]),
    (lambda: Slot("5ms", "2ms"), ValueError, ["slot", "min_delay <= max_delay"]),
    (lambda: Slot(0), ValueError, ["slot", "0 < min_delay"]),
    (lambda: Slot("5ms", packets=0), ValueError, ["slot.packets", ">= 1"]),
    (lambda: Slot("5ms", bytes=2.5), ValueError, ["slot.bytes", "whole number"]),
    (lambda: Slot("2h"), ValueError, ["slot.min_delay"]),
]


@pytest.mark.parametrize("make, error, words", BAD_MODELS, ids=[str(i) for i in range(len(BAD_MODELS))])
def test_bad_loss_models_and_slots_are_refused(make, error, words):
    with pytest.raises(error) as info:
        make()
    for word in words:
        assert word in str(info.value), f"{word!r} missing from: {info.value}"


BAD_HOSTS = [
    (dict(sysctls={"net.ipv4.tcp_rmem": "8192 4096 16384"}), ValueError, ["tcp_rmem", "min <= default <= max"]),
    (dict(sysctls={"net.ipv4.tcp_wmem": "4096 4096"}), ValueError, ["tcp_wmem", "three integers"]),
    (dict(sysctls={"net.ipv4.tcp_rmem": "0 4096 4096"}), ValueError, ["tcp_rmem", "min must be > 0"]),
    (dict(sysctls={"net.ipv4.tcp_rmem": "a b c"}), ValueError, ["tcp_rmem", "three integers"]),
    (dict(sysctls={"net.core.rmem_max": 1 << 24}), ValueError, ["net.core.rmem_max", "host-global"]),
    (dict(sysctls={"net.core.wmem_max": 1 << 24}), ValueError, ["net.core.wmem_max", "host-global"]),
    (dict(sysctls={"net.ipv4.tcp_mem": "1 2 3"}), ValueError, ["tcp_mem", "host-global"]),
    (dict(sysctls={"vm.swappiness": 10}), ValueError, ["vm.swappiness", "net."]),
    (dict(sysctls={"tcp_rmem": "4096 4096 4096"}), ValueError, ["tcp_rmem", "net."]),
    (dict(sysctls={"net.ipv4.tcp_sack": True}), TypeError, ["tcp_sack", "string"]),
    (dict(sysctls={"net.ipv4.tcp_sack": ""}), TypeError, ["tcp_sack", "non-empty"]),
    (dict(sysctls=["net.ipv4.tcp_sack"]), TypeError, ["sysctls", "dict"]),
    (dict(cc="bbrv9"), ValueError, ["cc", "unknown congestion control", "cubic"]),
    (dict(cc="CUBIC"), ValueError, ["cc", "unknown congestion control"]),
    (dict(sysctls={"net.ipv4.tcp_congestion_control": "turbo"}), ValueError, ["unknown congestion control"]),
    (dict(cc="bbr", sysctls={"net.ipv4.tcp_congestion_control": "cubic"}), ValueError, ["cc", "conflicts"]),
]


@pytest.mark.parametrize("kwargs, error, words", BAD_LINKS, ids=[repr(c[0]) for c in BAD_LINKS])
def test_bad_link_is_refused_with_a_helpful_message(kwargs, error, words):
    assert_refused(lambda: Link(**kwargs), error, words)


@pytest.mark.parametrize("kwargs, error, words", BAD_HOSTS, ids=[repr(c[0]) for c in BAD_HOSTS])
def test_bad_host_is_refused_with_a_helpful_message(kwargs, error, words):
    assert_refused(lambda: Host(**kwargs), error, words)


def test_link_rejects_positional_and_unknown_arguments():
    with pytest.raises(TypeError):
        Link("100mbit")
    with pytest.raises(TypeError):
        Link(bandwidth="100mbit")


def test_the_table_is_big_enough():
    assert len(BAD_LINKS) + len(BAD_HOSTS) >= 25


@pytest.mark.tcpnet_needs("privilege")
@pytest.mark.parametrize(
    "make_pair, error, words",
    [
        (
            lambda lab: lab.pair(client=Host(sysctls={"net.ipv4.tcp_no_such_knob": 1})),
            ValueError,
            ["client.sysctls", "unknown sysctl", "tcp_no_such_knob"],
        ),
        (lambda lab: lab.pair(link="100mbit"), TypeError, ["link", "Link"]),
        (lambda lab: lab.pair(server={"cc": "bbr"}), TypeError, ["server", "Host"]),
    ],
    ids=["unknown-sysctl", "link-not-a-Link", "server-not-a-Host"],
)
def test_lab_refuses_before_creating_anything(tcpnet, make_pair, error, words):
    mine = netlink.PREFIX + netlink.owner_tag() + "-"  # other xdist workers build labs meanwhile
    before = [n for n in netlink.lab_namespaces() if n.startswith(mine)]
    with pytest.raises(error) as info:
        make_pair(tcpnet)
    for word in words:
        assert word in str(info.value)
    assert [n for n in netlink.lab_namespaces() if n.startswith(mine)] == before


@pytest.mark.tcpnet_needs("privilege")
@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(nbytes=0), ["nbytes", "positive"]),
        (dict(nbytes=-1), ["nbytes", "positive"]),
        (dict(nbytes=1000, direction="sideways"), ["direction", "download"]),
        (dict(nbytes=1000, sndbuf=-16384), ["sndbuf", "1..2^31-1"]),
        (dict(nbytes=1000, rcvbuf="lots"), ["rcvbuf", "cannot parse"]),
        (dict(nbytes=1000, cc="warp"), ["cc", "unknown congestion control"]),
    ],
)
def test_transfer_refuses_bad_arguments_without_starting_processes(tcpnet, kwargs, words):
    pair = tcpnet.pair()
    with pytest.raises(ValueError) as info:
        pair.transfer(**kwargs)
    for word in words:
        assert word in str(info.value)
    assert netlink.pids_in_namespace(pair.server.namespace) == []


def test_netem_knobs_describe_themselves_as_tc_words():
    link = Link(
        delay="100ms",
        jitter="10ms",
        jitter_correlation="30%",
        distribution="normal",
        loss="1%",
        loss_correlation="25%",
        to_server={"gap": 5},
    )
    assert link.toward_client.describe() == (
        "no rate limit, 100 ms ± 10 ms (correlation 30%) normal, 1% loss (correlation 25%)"
    )
    # gap alone is tc's `reorder 100% gap 5`: every fifth packet skips the delay.
    assert link.toward_server.reorder == 1.0 and link.toward_server.gap == 5
    assert link.needs_netem and Link(delay="1ms", gap=2) != Link(delay="1ms", gap=3)
    assert Link(rtt="20ms", jitter="1ms").toward_client.distribution == "uniform"


def test_a_distribution_table_is_compiled_into_the_netem_request():
    """The table iproute2 ships goes inside TCA_OPTIONS as tc sends it (pyroute2 cannot encode it)."""
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from pytest_tcpnet.model import distribution_table
    from pytest_tcpnet.netlink.qdisc import _requests
    from pytest_tcpnet.netlink.rtnl import compile_request

    table = distribution_table("normal")
    values = [int(v) for line in open(table) if not line.lstrip().startswith("#") for v in line.split()]
    link = Link(delay="10ms", jitter="2ms", jitter_correlation="30%", distribution="normal", gap=5)
    ((_, command, kwargs),) = _requests(7, link.toward_client)[0]
    data = compile_request("tc", command, 1, **dict(kwargs))
    msg = tcmsg(data)
    msg.decode()
    options = msg.get_attr("TCA_OPTIONS")
    assert msg["header"]["length"] == len(data)
    assert options["gap"] == 5 and options.get_attr("TCA_NETEM_REORDER")["prob_reorder"] == 2**32 - 1
    assert options.get_attr("TCA_NETEM_CORR")["delay_corr"] == round(0.3 * (2**32 - 1))
    assert [name for name, _ in options["attrs"]][-1] == "TCA_NETEM_DELAY_DIST"
    assert data.endswith(struct.pack(f"={len(values)}h", *values)) and len(values) == 4096


def test_a_loss_model_and_slots_are_compiled_as_tc_sends_them():
    from pyroute2.netlink.rtnl.tcmsg import tcmsg

    from pytest_tcpnet.netlink.qdisc import _requests
    from pytest_tcpnet.netlink.rtnl import compile_request

    model = GilbertElliott(p="5%", r="25%", bad_loss="90%")
    link = Link(loss=model, slot=Slot("2ms", "8ms", packets=10))
    assert link.toward_client.loss == pytest.approx(0.05 * 0.9 / 0.30)  # the mean, for the model
    ((_, command, kwargs),) = _requests(7, link.toward_client)[0]
    data = compile_request("tc", command, 1, **dict(kwargs))
    msg = tcmsg(data)
    msg.decode()
    options = msg.get_attr("TCA_OPTIONS")
    assert options["loss"] == 0  # no independent loss beside the model
    # TCA_NETEM_LOSS (nested) holding NETEM_LOSS_GE {p, r, h, k1}, then TCA_NETEM_SLOT {ns, ns, packets, bytes, 0, 0}.
    slot = struct.pack("=HHqqiiqq", 44, 12, 2_000_000, 8_000_000, 10, 0, 0, 0)
    assert data.endswith(slot)
    loss_attr = data[-len(slot) - 24 : -len(slot)]
    assert struct.unpack("=HHHH", loss_attr[:8]) == (24, 5 | 0x8000, 20, 2)
    p, r, h, k1 = (v / (2**32 - 1) for v in struct.unpack("=IIII", loss_attr[8:]))
    assert (p, r, h, k1) == pytest.approx((0.05, 0.25, 0.1, 0.0), abs=1e-9)  # h: delivered in the bad state


# The one validation toolkit every layer uses (model/validation.py): one error shape, bools and NaN never pass.
@pytest.mark.parametrize(
    "check, args, value, words",
    [
        ("check_integer", (1, 10), True, "count: must be a whole number in 1..10, got True"),
        ("check_integer", (1, 10), 2.0, "got 2.0"),
        ("check_integer", (1, None), 0, "count: must be a whole number >= 1, got 0"),
        ("check_number", (0, None), float("nan"), "count: must be a finite number >= 0, got nan"),
        ("check_number", (0, 10), float("inf"), "count: must be a number in [0, 10], got inf"),
        ("check_number", (0, 10), "5", "got '5'"),
        ("check_number", (0, 10), False, "got False"),
    ],
)
def test_the_toolkit_refuses_in_one_shape(check, args, value, words):
    from pytest_tcpnet.model import validation

    with pytest.raises(ValueError) as refused:
        getattr(validation, check)("count", value, *args)
    assert words in str(refused.value)


def test_the_toolkit_passes_values_through_and_honours_open_bounds():
    from pytest_tcpnet.model.validation import check_integer, check_number, is_number

    assert check_integer("n", 5, 1, 10) == 5 and check_integer("n", -64, -64, 256) == -64
    assert check_number("x", 3, 0, 10) == 3 and isinstance(check_number("x", 3, 0, 10), int)
    assert check_number("x", 0, 0) == 0
    with pytest.raises(ValueError, match=r"x: must be a finite number > 0, got 0"):
        check_number("x", 0, 0, low_open=True)
    with pytest.raises(ValueError, match=r"x: must be in \(0, 10\] seconds, got 0"):
        check_number("x", 0, 0, 10, low_open=True, must="in (0, 10] seconds")
    assert [is_number(v) for v in (1, 1.5, True, float("nan"), "1", None)] == [True, True, False, False, False, False]
