"""Request/response exchanges (issue 21): the model's completion times, and real exchanges on the host."""

import pytest
from refusals import assert_refused

from pytest_tcpnet import Host, Link, netlink
from pytest_tcpnet.model import request_response_times
from pytest_tcpnet.model.tcpinfo import decode_tcp_info, field_reader


def test_a_new_connection_pays_its_handshake_and_slow_start_each_time():
    """100 KB at 100 ms on a fast link: handshake + request + 3 rounds of 10, 20, 40 segments = 4 RTTs (+ the
    last round's 5 ms on the link), the same for every new connection."""
    times = request_response_times(3, 100_000, rtt_s=0.1, window_bytes=4 << 20, rate_bps=95.6e6, new_connection=True)
    assert times == pytest.approx([0.4047] * 3, abs=1e-3)


def test_back_to_back_requests_keep_their_window_and_idle_ones_restart():
    warm = request_response_times(3, 100_000, rtt_s=0.1, window_bytes=4 << 20, rate_bps=95.6e6)
    assert warm[0] == pytest.approx(0.3047, abs=1e-3) and warm[1] < warm[0] and warm[2] < warm[1]
    idle = request_response_times(3, 100_000, rtt_s=0.1, window_bytes=4 << 20, rate_bps=95.6e6, interval_s=1.0)
    assert idle == pytest.approx([warm[0]] * 3)
    kept = request_response_times(
        3, 100_000, rtt_s=0.1, window_bytes=4 << 20, rate_bps=95.6e6, interval_s=1.0, slow_start_after_idle=False
    )
    assert kept == pytest.approx(warm)


def test_a_window_bounds_a_large_response_to_window_per_rtt():
    """Source 002's 13 MB through 64 KB in flight: ~RTT x 13 MB / 64 KB (1.0 s at 5 ms, 0.2 s at 1 ms)."""
    slow, fast = (
        request_response_times(1, 13_000_000, rtt_s=rtt, window_bytes=65536, rate_bps=956e6)[0]
        for rtt in (0.005, 0.001)
    )
    assert slow == pytest.approx(1.0, rel=0.01) and fast == pytest.approx(0.2, rel=0.01)


def test_a_large_request_takes_its_own_time_before_the_answer():
    """An upload acknowledged by the application (chunkup's 64 KB chunks, a 16-byte answer) at 0 RTT on 50 Mbit/s:
    the chunk's time on the link, 10.5 ms, not the answer's 2.6 us; 20 ms each way on a fast link adds the request's
    slow-start rounds (10 segments, 20, then the last 22,096 bytes: two RTTs) to the exchange's own round trip."""
    (upload,) = request_response_times(
        1, 16, rtt_s=0.0, window_bytes=65536, rate_bps=50e6, request_bytes=65536, request_rate_bps=50e6
    )
    assert upload == pytest.approx(65536 * 8 / 50e6 + 16 * 8 / 50e6)
    (unshaped,) = request_response_times(1, 16, rtt_s=0.0, window_bytes=65536, rate_bps=50e6, request_bytes=65536)
    assert unshaped == pytest.approx(16 * 8 / 50e6)
    (far,) = request_response_times(
        1, 16, rtt_s=0.04, window_bytes=65536, rate_bps=956e6, request_bytes=65536, request_rate_bps=956e6
    )
    assert far == pytest.approx(0.04 + 2 * 0.04 + 22_096 * 8 / 956e6 + 16 * 8 / 956e6)
    assert request_response_times(1, 16, rtt_s=0.04, window_bytes=65536) == [pytest.approx(0.04)]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(count=0, response_size=1000), ["count", "1..100000"]),
        (dict(count=True, response_size=1000), ["count"]),
        (dict(response_size=0), ["response_size"]),
        (dict(response_size=1000, request_size="big"), ["request_size"]),
        (dict(response_size=1000, request_size=0), ["request_size"]),
        (dict(response_size=1000, request_size=-64), ["request_size"]),
        (dict(response_size=1000, interval=-1), ["interval", "[0, 3600]"]),
        (dict(response_size=1000, sndbuf=-5), ["sndbuf"]),
        (dict(response_size=1000, cc="warp"), ["cc", "unknown congestion control"]),
    ],
)
@pytest.mark.tcpnet_needs("privilege")
def test_bad_requests_are_refused_before_any_process_starts(tcpnet, kwargs, words):
    pair = tcpnet.pair()
    assert_refused(lambda: pair.requests(**kwargs), ValueError, words)
    assert netlink.pids_in_namespace(pair.server.namespace) == []


@pytest.mark.tcpnet_needs("privilege")
def test_requests_on_the_host_take_the_link_s_time(tcpnet):
    """On a 100 Mbit/s host path (no delay): 20 responses of 650 KB through a 32 KB send buffer, back to back on one
    connection, take their time on the link (54.4 ms each, model 54.4); measured on the host 53.9-58.9 ms at
    p0-p95 beside a CPU hog, so the median is judged within 15%."""
    pair = tcpnet.pair(Link(rate="100mbit"))
    result = pair.requests(20, response_size=650_000, sndbuf="32kb")
    assert len(result.fct_s) == 20 and all(r.connected <= r.first_byte <= r.done for r in result.records)
    assert result.fct_percentile(50) == pytest.approx(result.expected_s[-1], rel=0.15), result.describe()
    fresh = pair.requests(3, response_size=100_000, new_connection=True)
    assert len(fresh.server_tcp_info) == 3, fresh.describe()  # one connection each
    # The RTT the model is read again at: the server's srtt after each write, averaged, never under its floor.
    floor_s = min(info["min_rtt"] for info in fresh.server_tcp_info) / 1e6
    assert fresh.observed_rtt_s is not None and fresh.observed_rtt_s >= floor_s, fresh.describe()


def test_one_tcp_info_field_read_alone_is_what_the_whole_struct_decodes():
    """The server's per-write srtt reads tcp_info up to tcpi_rtt only: the same value as the whole struct's."""
    raw = bytes(range(256)) * 2
    whole = decode_tcp_info(raw)
    for name in ("rtt", "pacing_rate", "min_rtt", "delivery_rate", "rehash"):  # u32s and u64s past padding
        size, read = field_reader(name)
        assert read(raw[:size]) == whole[name] and name not in decode_tcp_info(raw[: size - 1]), name
    with pytest.raises(KeyError, match="no field 'srtt'"):
        field_reader("srtt")


@pytest.mark.tcpnet_needs("privilege")
def test_requests_record_the_endpoints_as_a_transfer_does(tcpnet):
    """One reading of the kernel and sysctls serves every result kind: a RequestsResult records the same ones as a
    transfer on its pair, a sysctl its Host set included."""
    pair = tcpnet.pair(server=Host(sysctls={"net.ipv4.tcp_fin_timeout": 17}))
    exchanges = pair.requests(2, response_size=10_000)
    flow = pair.transfer(100_000)
    assert exchanges.sysctls == flow.sysctls and exchanges.kernel == flow.kernel
    assert exchanges.sysctls["server"]["net.ipv4.tcp_fin_timeout"] == "17", exchanges.sysctls["server"]
