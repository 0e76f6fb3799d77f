"""The kernel-aware window, buffer and throughput model (pure; no root)."""

import dataclasses

import pytest

from pytest_tcpnet import Link, model
from pytest_tcpnet.analysis.limits import chrono_shares, classify_sample, limited_by, sample_shares
from pytest_tcpnet.records import ConnectionEnd

BIG_CAPS = {"net.core.rmem_max": "4194304", "net.core.wmem_max": "4194304"}


def test_setsockopt_doubles_caps_and_floors():
    assert model.effective_socket_buffer(16384, 212992) == 32768
    assert model.effective_socket_buffer(1_000_000, 212992) == 425984  # capped by *mem_max, then doubled
    assert model.effective_socket_buffer(1, 212992, kind="rcv") == model.SOCK_MIN_RCVBUF == 2304
    assert model.effective_socket_buffer(1, 212992, kind="snd") == model.SOCK_MIN_SNDBUF == 4608


def test_window_before_6_6_is_half_the_doubled_buffer():
    # C8 on 6.1: SO_RCVBUF 64 KB -> 128 KB buffer -> 64 KB, offered as 44 whole 1460-byte segments.
    assert model.advertised_window(65536, kernel="6.1.0-56-amd64", sysctls=BIG_CAPS) == 64240  # measured: 64240
    assert (
        model.advertised_window(65536, kernel="6.1.0", sysctls={**BIG_CAPS, "net.ipv4.tcp_adv_win_scale": "2"})
        == (131072 - 32768) // 1460 * 1460
    )


@pytest.mark.parametrize(
    "request_bytes, measured", [(4096, 2920), (8192, 7300), (16384, 16060), (32768, 32120), (131072, 129624)]
)
def test_window_on_6_1_matches_the_vm(request_bytes, measured):
    # Measured in the 6.1 VM with pair.measure_advertised_window (rmem_max 212992 there).
    assert model.advertised_window(
        request_bytes, kernel="6.1.0", sysctls={"net.core.rmem_max": "212992"}
    ) == pytest.approx(measured, rel=0.01)


def test_window_from_6_6_uses_the_learned_scaling_ratio():
    # 6.18 measured 77.8-81.5 KB for SO_RCVBUF 64 KB: 0.61 of the 128 KB buffer.
    window = model.advertised_window(65536, kernel="6.18.44", sysctls=BIG_CAPS)
    assert window == int(131072 * model.LEARNED_SCALING_RATIO) // 1448 * 1448
    assert 0.96 * 77836 < window < 1.04 * 81500
    assert model.advertised_window(65536, kernel="6.18", sysctls=BIG_CAPS, scaling_ratio=0.5) == 65536 // 1448 * 1448


def test_window_without_setsockopt_comes_from_tcp_rmem():
    fixed = {"net.ipv4.tcp_rmem": "4096 131072 6291456", "net.ipv4.tcp_moderate_rcvbuf": "0"}
    assert model.receive_space(None, sysctls=fixed) == 131072
    assert model.receive_space(None, sysctls={"net.ipv4.tcp_rmem": "4096 131072 6291456"}) == 6291456
    assert model.advertised_window(None, kernel="6.1", sysctls=fixed) == 64240  # measured in the VM: 64256


def test_rmem_max_caps_the_request():
    assert (
        model.advertised_window(1 << 20, kernel="6.1", sysctls={"net.core.rmem_max": "212992"}) == 212992 // 1460 * 1460
    )


def test_send_window_small_writes_keep_the_buffer_in_flight():
    assert model.send_window(16384, kernel="6.1", sysctls=BIG_CAPS, chunk_bytes=16384) == 32768
    assert model.send_window(16384, kernel="6.18", sysctls=BIG_CAPS, chunk_bytes=4096) == 32768


def test_send_window_large_writes_overshoot_by_the_whole_write_on_every_kernel():
    # 6.1: the whole write (measured 710 KB queued for 1 MB writes); 6.18: < two ~64 KB skbs (126 KB).
    assert model.send_window(16384, kernel="6.1", sysctls=BIG_CAPS, chunk_bytes=1 << 20) == 32768 + (1 << 20)
    # 6.18 too: its smaller figure (55-126 KB) was measured on an undelayed path, where 6.1 and 6.12 keep as little.
    assert model.send_window(16384, kernel="6.18", sysctls=BIG_CAPS, chunk_bytes=1 << 20) == 32768 + (1 << 20)
    assert model.send_window(None, kernel="6.1", sysctls={"net.ipv4.tcp_wmem": "4096 16384 65536"}) == 65536


def test_prediction_names_the_binding_bound():
    link_bound = model.expected_throughput(model.Conditions(kernel="6.18", rtt_s=0.0001, rate_bps=50e6))
    assert link_bound.bound == "link" and link_bound.bps == pytest.approx(50e6 * 1448 / 1514)
    rwnd = model.expected_throughput(
        model.Conditions(kernel="6.1", rtt_s=0.05, rate_bps=100e6, so_rcvbuf=32768, receiver_sysctls=BIG_CAPS)
    )
    # Sustained: one 1460-byte segment short of the 32120-byte maximum (measured 30408 in the VM).
    assert rwnd.bound == "rwnd" and rwnd.bps == pytest.approx((32120 - 1460) * 8 / 0.05)
    assert "30.66 kB receive window" in rwnd.why and "6.6" in rwnd.why
    loss = model.expected_throughput(model.Conditions(kernel="6.1", rtt_s=0.1, rate_bps=100e6, loss=0.01, cc="cubic"))
    assert loss.bound == "loss" and loss.bps == pytest.approx(model.mathis_throughput(1448, 0.1, 0.01))


def test_no_loss_bound_for_bbr():
    prediction = model.expected_throughput(
        model.Conditions(kernel="6.1", rtt_s=0.1, rate_bps=100e6, loss=0.01, cc="bbr")
    )
    assert "loss" not in prediction.bounds and model.loss_bound("bbr", 0.1, 0.01) is None


def test_an_unshaped_path_is_bound_by_what_the_host_carries():
    limit = model.HostLimit(bps=3.1e9, runs_bps=(2.4e9, 3.1e9, 2.9e9), run_s=0.5, kernel="6.1.0")
    assert "median of 3 runs of 500 ms: 2.4 Gbit/s, 3.1 Gbit/s, 2.9 Gbit/s" in limit.describe()
    # An unshaped path at 50 us of RTT: the window allows ~1 Tbit/s, the host carries 3.1 Gbit/s.
    unshaped = model.Conditions(kernel="6.1", rtt_s=50e-6, host_bps=limit.bps, host_why=limit.describe())
    prediction = model.expected_throughput(unshaped)
    assert prediction.bound == "host" and prediction.bps == pytest.approx(3.1e9)
    assert prediction.why.startswith("host-limited: one unshaped flow carried 3.1 Gbit/s on this host")
    assert model.expected_throughput(dataclasses.replace(unshaped, host_bps=None)).bound == "rwnd"
    # A link slower than the host, or a small window, binds before it.
    assert model.expected_throughput(dataclasses.replace(unshaped, rate_bps=1e9)).bound == "link"
    assert model.expected_throughput(dataclasses.replace(unshaped, so_rcvbuf=4096)).bound == "rwnd"
    given = model.HostLimit(bps=4e9, runs_bps=(), run_s=0.0, kernel="6.1.0", source="--tcpnet-host-limit")
    assert given.describe() == "this host carries 4 Gbit/s on an unshaped path (--tcpnet-host-limit)"
    with pytest.raises(ValueError, match="bps"):
        model.HostLimit(bps=0, runs_bps=(), run_s=0.5, kernel="6.1.0")


def test_nothing_to_bound_is_an_error():
    with pytest.raises(ValueError, match="no bound applies"):
        model.expected_throughput(model.Conditions(kernel="6.18", rtt_s=0))


@pytest.mark.parametrize(
    "kwargs, field",
    [({"rtt_s": -1}, "rtt_s"), ({"rtt_s": 0.1, "loss": 1.5}, "loss"), ({"rtt_s": 0.1, "rate_bps": 0}, "rate_bps")],
)
def test_conditions_are_validated(kwargs, field):
    with pytest.raises(ValueError, match=field):
        model.Conditions(kernel="6.1", **kwargs)


def _recorded_download(**tcp_info):
    """A finished download as a TransferResult records it: a 100 Mbit/s, 20 ms link, SO_SNDBUF 16 kB, cubic."""
    from pytest_tcpnet import Host
    from pytest_tcpnet.results import TransferResult

    return TransferResult(
        nbytes=4_000_000,
        direction="download",
        kernel="6.1.0-56-amd64",
        link=Link(rate="100mbit", rtt="20ms"),
        client=Host(),
        server=Host(),
        sysctls={"client": {"net.ipv4.tcp_rmem": "4096 131072 6291456"}, "server": {"net.core.wmem_max": "212992"}},
        sndbuf_requested=16384,
        sender=ConnectionEnd(
            local=("198.19.0.2", 5001),
            remote=("198.18.0.2", 40000),
            tcp_info={"min_rtt": 20300, "rtt": 25100, "snd_wnd": 64240, **tcp_info},
            buffers={"cc": "cubic"},
        ),
    )


def test_conditions_from_a_result():
    result = _recorded_download()
    c = result.model_conditions()
    assert (c.rate_bps, c.rtt_s, c.so_sndbuf, c.cc, c.nbytes) == (100e6, 0.0203, 16384, "cubic", 4_000_000)
    assert c.receiver_sysctls["net.ipv4.tcp_rmem"].startswith("4096")
    assert model.Conditions.from_result(result) == c  # the documented spelling asks the result
    observed = result.model_conditions(observed=True)
    assert (observed.window_bytes, observed.rtt_s) == (64240, 0.0251)  # srtt (no samples): the RTT the flow saw
    assert model.expected_throughput(result) == model.expected_throughput(c)
    assert result.model_phases() == []  # a link that never changes has no phases


def test_the_model_refuses_what_states_no_conditions():
    with pytest.raises(TypeError, match=r"model.Conditions or a result .* got dict"):
        model.expected_throughput({"rtt_s": 0.02})


def test_limited_by_falls_back_to_the_chrono_counters_without_samples():
    info = {"busy_time": 1_000_000, "rwnd_limited": 700_000, "sndbuf_limited": 100_000}
    label, shares, basis = limited_by(info)
    assert (label, basis) == ("rwnd", "chrono") and shares["cwnd"] == pytest.approx(0.2)
    assert limited_by(info, duration_s=4.0)[0] == "app"
    assert chrono_shares(info) == shares
    with pytest.raises(ValueError, match="busy_time"):
        limited_by({"rtt": 1})


#: Shaped like the 6.1 VM's C11 flow: SO_SNDBUF 32 KB effective, ~24 segments in flight, cwnd 150.
BLOCKED_ON_SNDBUF = {
    "notsent_bytes": 0,
    "wmem_queued": 46_000,
    "sndbuf": 32768,
    "unacked": 24,
    "snd_cwnd": 150,
    "snd_wnd": 131_072,
    "snd_mss": 1448,
}


@pytest.mark.parametrize(
    "change, label",
    [
        ({}, "sndbuf"),  # everything written in flight, buffer full, room in both windows
        ({"wmem_queued": 8_000}, "app"),  # nothing unsent and room in the buffer: the application is not writing
        ({"notsent_bytes": 65_536, "snd_wnd": 24 * 1448}, "rwnd"),  # data waits, the peer's window is full
        ({"notsent_bytes": 65_536, "snd_wnd": 2_920, "unacked": 2}, "rwnd"),  # a 4 KB receiver: no room for a segment
        (
            {"notsent_bytes": 65_536, "snd_wnd": 4_096, "unacked": 0},
            "rwnd",
        ),  # ... just acked: room for 2, cwnd far bigger
        ({"notsent_bytes": 65_536, "snd_cwnd": 24}, "cwnd"),  # data waits, cwnd is full
        # Data waits with room in both windows and more written than cwnd holds: pacing, the path.
        ({"notsent_bytes": 65_536, "snd_cwnd": 60}, "cwnd"),
        ({"notsent_bytes": 65_536, "wmem_queued": 8_000}, "cwnd"),  # ... or with room in the buffer
        # ... but a full buffer whose every byte fits cwnd bounds what is in flight, the stack a moment behind
        # (fresh-clone CI run 12: a 16 KB SO_SNDBUF at 20 ms under UML beside a CPU hog, cwnd 60, ~22 in flight).
        ({"notsent_bytes": 40_000, "unacked": 22, "snd_cwnd": 60}, "sndbuf"),
        ({"notsent_bytes": 65_536}, "sndbuf"),
        ({"snd_cwnd": 24}, "cwnd"),  # the buffer is full but so is cwnd
        ({"snd_wnd": 24 * 1448}, "rwnd"),  # ... or the peer's window
        # A stop-and-wait protocol (16 KB per application ACK, cwnd 25) waiting for its own reply:
        ({"notsent_bytes": 0, "unacked": 11, "snd_cwnd": 25, "wmem_queued": 24_000, "sndbuf": 87_040}, "app"),
        ({"notsent_bytes": 0, "unacked": 0, "snd_cwnd": 25, "wmem_queued": 0, "sndbuf": 87_040}, "app"),
    ],
)
def test_each_sample_names_what_held_the_sender(change, label):
    assert classify_sample(dict(BLOCKED_ON_SNDBUF, **change)) == label


def test_samples_decide_and_the_chrono_only_without_enough_of_them():
    busy = {"busy_time": 1_000_000, "rwnd_limited": 0, "sndbuf_limited": 0}  # the chrono says "cwnd" 100%
    label, shares, basis = limited_by(busy, samples=[BLOCKED_ON_SNDBUF] * 3)
    assert (label, basis, shares["sndbuf"]) == ("sndbuf", "3 samples", 1.0)
    idle = dict(BLOCKED_ON_SNDBUF, wmem_queued=0)
    assert limited_by(busy, samples=[BLOCKED_ON_SNDBUF, idle, idle])[:2] == (
        "app",
        {"rwnd": 0.0, "sndbuf": pytest.approx(1 / 3), "cwnd": 0.0, "app": pytest.approx(2 / 3)},
    )
    assert limited_by(busy, samples=[BLOCKED_ON_SNDBUF] * 2)[::2] == ("cwnd", "chrono")  # too few samples
    assert limited_by(busy, samples=[{"unacked": 3}] * 5)[2] == "chrono"  # no socket memory sampled
    assert sample_shares([]) == ({}, 0)


def test_the_applications_own_window_and_pace_bound_the_flow():
    # Issue 18's stop-and-wait protocol: 16 KB per application ACK at 40 ms on 20 Mbit/s (measured 2.6 Mbit/s):
    # each round is the RTT plus the chunk's 6.85 ms on the link (1448 payload bytes per 1514), 2.80 Mbit/s.
    c = model.Conditions(kernel="6.1", rtt_s=0.04, rate_bps=20e6, app_window_bytes=16384)
    p = model.expected_throughput(c)
    assert p.bound == "app" and p.bps == pytest.approx(16384 * 8 / (0.04 + 16384 * 8 * 1514 / 1448 / 20e6))
    assert p.bps == pytest.approx(2.80e6, rel=0.01)
    assert "keeps 16.38 kB outstanding per round of 46.85 ms" in p.why
    # The lab's shaper sends its burst at once after each idle round trip: under UML's 10 kB (4 ms of 20 Mbit/s),
    # 9.56 kB of the chunk's payload skips the link's pace, and the round is 42.85 ms (measured: 42.6-43.1 ms).
    uml = model.expected_throughput(dataclasses.replace(c, burst_bytes=10_000))
    assert uml.bps == pytest.approx(16384 * 8 / (0.04 + (16384 - 10_000 * 1448 / 1514) * 8 * 1514 / 1448 / 20e6))
    assert "round of 42.85 ms" in uml.why and "9.564 kB of payload leaves in its 10 kB burst" in uml.why
    tcg = model.expected_throughput(dataclasses.replace(c, burst_bytes=20_000))  # 8 ms: the whole chunk at once
    assert tcg.bps == pytest.approx(16384 * 8 / 0.04) and "sends the whole window at once" in tcg.why
    # What it sends at once is what it gathered while the flow waited: at 0 RTT nothing, and a window above the
    # path's BDP keeps the link busy, so the link binds, not the application.
    busy = model.expected_throughput(dataclasses.replace(c, burst_bytes=10_000, rtt_s=100e-6))
    assert busy.bound == "link" and "app" not in busy.bounds
    unshaped = model.expected_throughput(model.Conditions(kernel="6.1", rtt_s=0.04, app_window_bytes=16384))
    assert unshaped.bps == pytest.approx(16384 * 8 / 0.04)
    paced = model.expected_throughput(model.Conditions(kernel="6.1", rtt_s=0.0, rate_bps=20e6, app_rate_bps=3.2e6))
    assert (paced.bound, paced.bps) == ("app", 3.2e6)
    # curl's --limit-rate is named as the bound; 4 MB at 200 KiB/s over a 24 us path keeps under a segment in flight
    # per round trip, so no slow start is counted ("813803 round trips" before).
    curl = model.Conditions(
        kernel="6.1", rtt_s=24e-6, rate_bps=100e6, app_rate_bps=204800 * 8, app_rate_by="curl --limit-rate 200k"
    )
    limited = model.expected_throughput(dataclasses.replace(curl, nbytes=4_000_000))
    assert (limited.bound, limited.bps) == ("app", 204800 * 8)
    assert limited.why == "app-limited: the application moves 1.638 Mbit/s (curl --limit-rate 200k)"
    with pytest.raises(ValueError, match="app_window_bytes"):
        model.Conditions(kernel="6.1", rtt_s=0.04, app_window_bytes=0)


def test_a_window_beyond_the_bdp_is_explained_by_the_queue_the_spec_builds():
    # cubic, 40 ms, 20 Mbit/s (BDP 100 kB), tcp_rmem max 6 MB: the window waits in the 1000-packet FIFO.
    c = model.Conditions(
        kernel="6.1",
        rtt_s=0.04,
        rate_bps=20e6,
        cc="cubic",
        queue_packets=1000,
        receiver_sysctls={"net.ipv4.tcp_rmem": "4096 131072 6291456"},
    )
    p = model.expected_throughput(c)
    assert p.bound == "link"
    queue_s = 1000 * 1448 * 8 / model.link_goodput(20e6)  # the full queue drains in ~0.61 s
    assert p.loaded_rtt_s == pytest.approx(0.04 + queue_s, rel=1e-6)
    assert "stand in the 1000-packet bottleneck queue: RTT under load ~" in p.why and "overflows" in p.why
    small = model.expected_throughput(
        model.Conditions(kernel="6.1", rtt_s=0.04, rate_bps=20e6, cc="cubic", queue_packets=1000, so_rcvbuf=65536)
    )
    assert small.bound == "rwnd" and small.loaded_rtt_s == 0.04 and "queue" not in small.why  # below the BDP
    bbr = model.expected_throughput(model.Conditions(**{**c.__dict__, "cc": "bbr"}))
    assert bbr.loaded_rtt_s == 0.04  # bbr keeps its queue near empty


def test_a_known_size_pays_for_slow_start():
    steady = model.Conditions(kernel="6.1", rtt_s=0.05, rate_bps=100e6)
    short = model.Conditions(kernel="6.1", rtt_s=0.05, rate_bps=100e6, nbytes=8_000_000)
    assert model.expected_throughput(short).bound == "link"
    assert model.expected_throughput(short).bps < 0.9 * model.expected_throughput(steady).bps
    assert "round trips with slow start" in model.expected_throughput(short).why
