"""Assertion helpers: pass inside the tolerance, explain a failure with numbers and conditions."""

import pytest

from pytest_tcpnet import Host, Link, assert_receive_window_within, assert_throughput_within
from pytest_tcpnet.results import WindowProbe
from pytest_tcpnet.workload.fake import fake_result


def _result(nbytes=10_000_000, duration_s=2.0):
    # A result as a transfer returns it; made up because only the arithmetic is under test.
    return fake_result(
        nbytes=nbytes,
        duration_s=duration_s,
        kernel="6.18.44",
        link=Link(rate="50mbit", rtt="20ms"),
        client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}),
        sender_buffers={"cc": "cubic", "sndbuf": 87040},
        receiver_buffers={"rcvbuf": 8192},
        sender_tcp_info={
            "rtt": 20500,
            "snd_cwnd": 10,
            "total_retrans": 3,
            "dsack_dups": 0,
            "rwnd_limited": 1_500_000,
            "sndbuf_limited": 0,
            "busy_time": 2_000_000,
        },
    )


def test_throughput_within_passes_inside_the_band():
    assert _result().throughput_bps == 40e6
    assert_throughput_within(_result(), 42e6, rel=0.1)


def test_throughput_failure_shows_numbers_and_conditions():
    with pytest.raises(AssertionError) as info:
        assert_throughput_within(_result(), 50e6, rel=0.1)
    message = str(info.value)
    for words in (
        "40 Mbit/s",
        "80.0% of the expected 50 Mbit/s",
        "allowed 90%..110%",
        "RTT 20 ms",
        "tcp_rmem=4096 4096 4096",
        "kernel: 6.18.44",
        "rwnd_limited 1500 ms",
        "retrans 3",
    ):
        assert words in message, message


@pytest.mark.parametrize("rel", [0, 1, -0.1, 2])
def test_throughput_tolerance_must_be_meaningful(rel):
    with pytest.raises(ValueError, match="rel"):
        assert_throughput_within(_result(), 40e6, rel=rel)


def _probe(window, kernel, adv_win_scale="1"):
    return WindowProbe(
        window_bytes=window,
        rcvbuf_requested=65536,
        rcvbuf_effective=131072,
        kernel=kernel,
        sysctls={"net.ipv4.tcp_adv_win_scale": adv_win_scale},
        transfer=_result(),
    )


def test_window_failure_on_a_new_kernel_names_scaling_ratio():
    with pytest.raises(AssertionError) as info:
        assert_receive_window_within(_probe(80732, "6.18.44-fc"), 65536, rel=0.1)
    message = str(info.value)
    for words in (
        "80732 B is 123%",
        "scaling_ratio",
        ">= 6.6",
        "ignored since 6.6",
        "62% of the 131.1 kB buffer",
        "doubles",
    ):
        assert words in message, message


def test_window_failure_on_an_old_kernel_names_adv_win_scale():
    with pytest.raises(AssertionError) as info:
        assert_receive_window_within(_probe(98304, "6.1.0-56-amd64", adv_win_scale="2"), 65536, rel=0.1)
    assert "tcp_adv_win_scale = 2" in str(info.value) and "< 6.6" in str(info.value)


def test_window_within_passes():
    assert_receive_window_within(_probe(64240, "6.1.0-56-amd64"), 65536, rel=0.1)


# Confidence intervals over repetitions (assert_throughput_within(..., confidence=)).
def _trials(*mbits):
    """A measure() that returns fake transfers of these rates in turn (1 s each)."""
    from pytest_tcpnet.workload.fake import fake_result

    rates = iter(mbits)
    return lambda: fake_result(nbytes=int(next(rates) * 1e6 / 8), duration_s=1.0)


def test_an_interval_inside_the_tolerance_passes():
    from pytest_tcpnet import assert_throughput_within

    assert_throughput_within(_trials(9.9, 10.1, 10.0, 9.95, 10.05), 10e6, rel=0.1, confidence=0.95)


def test_an_interval_outside_the_tolerance_fails_and_says_so():
    from pytest_tcpnet import assert_throughput_within

    with pytest.raises(
        AssertionError,
        match=r"interval of the mean goodput ratio is 0\.690\.\.0\.718 \(mean 0\.704.*outside the tolerance",
    ):
        assert_throughput_within(_trials(7.0, 7.2, 6.9, 7.1, 7.0), 10e6, rel=0.1, confidence=0.95)


def test_an_undecided_interval_says_how_many_trials_would_decide():
    from pytest_tcpnet import assert_throughput_within

    with pytest.raises(AssertionError) as failure:
        assert_throughput_within(_trials(8.6, 9.4, 8.8), 10e6, rel=0.1, trials=3, confidence=0.95)
    text = str(failure.value)
    assert "undecided: the interval straddles a bound" in text and "trials in all would decide it" in text, text


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(confidence=1.0), "confidence: must be a probability in (0, 1), got 1.0"),
        (dict(confidence=0.95, trials=1), "trials: must be a whole number >= 2"),
        (dict(confidence="95%"), "confidence: must be a probability in (0, 1), got '95%'"),
    ],
)
def test_bad_confidence_arguments_are_refused(kwargs, words):
    from pytest_tcpnet import assert_throughput_within

    with pytest.raises(ValueError) as refused:
        assert_throughput_within(_trials(10, 10, 10), 10e6, rel=0.1, **kwargs)
    assert words in str(refused.value)


def test_a_finished_result_cannot_give_an_interval():
    from pytest_tcpnet import assert_throughput_within
    from pytest_tcpnet.workload.fake import fake_result

    with pytest.raises(ValueError, match="confidence: needs a callable"):
        assert_throughput_within(fake_result(), 10e6, rel=0.1, confidence=0.9)


@pytest.mark.tcpnet_needs("privilege", "htb")
def test_an_interval_over_real_transfers(tcpnet):
    """Five 1 MB downloads on a 20 Mbit/s htb path against the model: measured 0.998-1.001 of it here; the 95%
    interval of their mean sits well inside ±5%."""
    from pytest_tcpnet import Link, assert_throughput_within

    pair = tcpnet.pair(link=Link(rate="20mbit"))
    assert_throughput_within(lambda: pair.transfer(1_000_000), rel=0.05, trials=5, confidence=0.95)
