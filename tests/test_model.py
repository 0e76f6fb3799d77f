"""Pure model layer: units, spec resolution, TCP formulas (no root needed)."""

import math

import pytest

from pytest_tcpnet import GilbertElliott, Host, Link, model
from pytest_tcpnet.model import KernelVersion, OneWay


@pytest.mark.parametrize(
    "text, bps",
    [
        ("100mbit", 100e6),
        ("1gbit", 1e9),
        ("64kbit", 64e3),
        ("10mbps", 80e6),
        ("1.5Mbit", 1.5e6),
        (50e6, 50e6),
        ("1kibit", 1024),
    ],
)
def test_parse_rate_uses_tc_units(text, bps):
    assert model.parse_rate(text) == pytest.approx(bps)


@pytest.mark.parametrize("text, seconds", [("20ms", 0.02), ("1s", 1), ("250us", 250e-6), ("0.5", 0.5), (0.01, 0.01)])
def test_parse_time(text, seconds):
    assert model.parse_time(text) == pytest.approx(seconds)


def test_parse_size_is_binary_like_tc():
    assert model.parse_size("64kb") == 65536
    assert model.parse_size("1mb") == 1 << 20


def test_rtt_is_split_evenly_between_directions():
    link = Link(rate="100mbit", rtt="20ms", loss="1%")
    assert link.toward_client == link.toward_server
    assert link.toward_client.delay_s == pytest.approx(0.010)
    assert link.rtt_s == pytest.approx(0.020)
    assert link.toward_client.loss == pytest.approx(0.01)
    assert link.needs_netem


def test_per_direction_overrides():
    link = Link(rtt="40ms", rate="1gbit", to_server={"rate": "10mbit", "loss": 0.02})
    assert link.toward_client.rate_bps == 1e9 and link.toward_client.loss == 0
    assert link.toward_server.rate_bps == 10e6 and link.toward_server.loss == 0.02
    assert link.toward_server.delay_s == pytest.approx(0.02)
    assert "to server" in link.describe()


def test_unimpaired_link_needs_nothing():
    link = Link()
    assert link.toward_client.is_unimpaired and not link.needs_netem and link.rtt_s == 0


def test_rate_only_does_not_need_netem():
    assert not Link(rate="50mbit").needs_netem


def test_netem_limit_covers_bdp_plus_queue():
    # 100 Mbit/s, 50 ms one way: 12.5 MB/s * 0.05 s = 625 kB in the delay line = 413 frames.
    way = Link(rate="100mbit", delay="50ms", limit=200).toward_client
    assert way.in_flight_packets() == math.ceil(100e6 / 8 * 0.05 / 1514)
    assert way.netem_limit_packets() == way.in_flight_packets() + 200
    assert way.netem_limit_packets() > 1000 or way.in_flight_packets() + 200 == way.netem_limit_packets()


def test_limit_in_bytes_becomes_packets():
    assert Link(rate="10mbit", limit="64kb").toward_client.queue_packets == math.ceil(65536 / 1514)


def test_links_compare_by_what_they_do():
    assert Link(rtt="20ms") == Link(delay="10ms")
    assert Link(rtt="20ms") != Link(rtt="21ms")
    assert Link(rtt="20ms").replace(rtt="40ms").rtt_s == pytest.approx(0.04)


def test_link_is_immutable():
    with pytest.raises(AttributeError):
        Link().toward_client = OneWay()


def test_host_normalizes_sysctls_and_cc():
    host = Host(sysctls={"net.ipv4.tcp_rmem": (4096, 4096, 4096), "net.ipv4.tcp_sack": 0}, cc="bbr")
    assert host.sysctls == {
        "net.ipv4.tcp_rmem": "4096 4096 4096",
        "net.ipv4.tcp_sack": "0",
        "net.ipv4.tcp_congestion_control": "bbr",
    }
    assert host.cc == "bbr"
    assert Host(sysctls={"net.ipv4.tcp_congestion_control": "cubic"}).cc == "cubic"


def test_bdp_and_window_law():
    # C7: 1000 Mbit/s * 50 ms = 6.25 MB.
    assert model.bdp(1000e6, 0.05) == pytest.approx(6.25e6)
    # C1: a 1040-byte window at 10 ms RTT -> 104 kB/s = 832 kbit/s.
    assert model.window_limited_throughput(1040, 0.010) == pytest.approx(1040 * 8 / 0.010)
    assert model.window_for_throughput(100e6, 0.02) == pytest.approx(250_000)


def test_socket_buffer_doubling_and_cap():
    # C12: the kernel doubles the request, capped first by net.core.*mem_max.
    assert model.effective_socket_buffer(16384, 212992) == 32768
    assert model.effective_socket_buffer(262144, 131072) == 262144


def test_adv_win_scale_one_gives_half_the_buffer():
    # C8: tcp_adv_win_scale = 1 -> advertised window = rmem / 2.
    assert model.advertised_window_adv_win_scale(13107200, 1) == 6553600
    assert model.advertised_window_adv_win_scale(4096, 2) == 3072
    assert model.advertised_window_adv_win_scale(4096, -2) == 1024


def test_mathis_bound_falls_with_sqrt_of_loss():
    one = model.mathis_throughput(1448, 0.1, 0.01)
    four = model.mathis_throughput(1448, 0.1, 0.04)
    assert one / four == pytest.approx(2.0)


@pytest.mark.parametrize(
    "release, expected, scaling",
    [("6.1.0-56-amd64", (6, 1, 0), False), ("6.18.44-fc-v669", (6, 18, 44), True), ("6.6", (6, 6, 0), True)],
)
def test_kernel_version(release, expected, scaling):
    version = KernelVersion.parse(release)
    assert (version.major, version.minor, version.patch) == expected
    assert version.uses_scaling_ratio is scaling


@pytest.mark.parametrize(
    "release, rule, window",
    [
        ("6.1.0-56-amd64", "1/2^tcp_adv_win_scale, kernel < 6.6", 64240),  # measured 64240 (docs/model.md)
        ("6.6.0", "the 2024 halving", 32768 // 1448 * 1448),  # a quarter of the doubled request: the report's halving
        ("6.9.12", "the 2024 halving", 32768 // 1448 * 1448),
        ("6.12.95+deb12-amd64", "kernel >= 6.10", 79640),  # measured 76.9 KB (-3.4%)
        ("6.18.44-fc", "kernel >= 6.10", 79640),  # measured 77836-81500
    ],
)
def test_each_release_names_its_window_rule_and_a_64_kb_so_rcvbuf_gets_its_window(release, rule, window):
    """The 2024 case (source 002): SO_RCVBUF 64 KB under 6.1, 6.6-6.9 and 6.10+ rules."""
    version = KernelVersion.parse(release)
    assert rule in version.window_rule
    assert model.advertised_window(65536, kernel=version) == window
    # An autotuned receiver is not clamped at the first guess on 6.6-6.9: only a set SO_RCVBUF locks it.
    assert model.advertised_window(None, kernel="6.7.0") == model.advertised_window(None, kernel="6.12.0")


@pytest.mark.parametrize(
    "call",
    [
        lambda: model.bdp(0, 0.1),
        lambda: model.bdp(1e6, -1),
        lambda: model.window_limited_throughput(1000, 0),
        lambda: model.mathis_throughput(1448, 0.1, 0),
        lambda: model.mathis_throughput(1448, 0.1, 1.5),
        lambda: model.effective_socket_buffer(-1, 100),
        lambda: KernelVersion.parse("linux"),
    ],
)
def test_formulas_reject_nonsense(call):
    with pytest.raises(ValueError):
        call()


def test_links_in_series_are_the_path_a_flow_crosses():
    near, bottleneck = Link(rate="10mbit", rtt="10ms", loss="1%"), Link(rate="30mbit", rtt="20ms", loss="2%", limit=50)
    path = Link.in_series(near, bottleneck)
    assert path.rate_bps == 10e6 and path.rtt_s == pytest.approx(0.030)
    assert path.toward_server.loss == pytest.approx(1 - 0.99 * 0.98)
    assert path.toward_client.queue_packets is None  # the slowest link's queue: the access link's default
    assert Link.in_series(Link(rate="50mbit"), bottleneck).toward_client.queue_packets == 50
    assert Link.in_series(bottleneck) is bottleneck
    # Per direction: a rate toward the server only stays toward the server.
    one_way = Link.in_series(Link(to_server={"rate": "5mbit"}), Link(rtt="4ms"))
    assert (one_way.toward_server.rate_bps, one_way.toward_client.rate_bps) == (5e6, None)
    # netem's finer knobs: kept from the one link that has them, refused on two.
    assert Link.in_series(Link(rtt="10ms", gap=5), Link(rate="10mbit")).toward_client.gap == 5
    with pytest.raises(ValueError, match="gap: set on 2 links"):
        Link.in_series(Link(rtt="10ms", gap=5), Link(rtt="10ms", gap=3))
    with pytest.raises(ValueError, match="Gilbert-Elliott model and another link's loss"):
        Link.in_series(Link(loss=GilbertElliott(0.01, 0.5)), Link(loss="1%"))
    with pytest.raises(TypeError, match="links: expected one or more Link"):
        Link.in_series(near, "10mbit")
