"""Event assertions on synthetic captures: the logic and the failure messages (real captures: test_capture.py)."""

import pytest

from pytest_tcpnet import (
    CaptureResult,
    assert_loss_signature,
    assert_no_retransmissions,
    assert_no_window_full,
    assert_window_full,
    assert_zero_window,
)
from pytest_tcpnet.capture import Packet


def _capture(tmp_path, kinds_per_segment, segments=100, in_flight=2000, acks=()):
    """A CaptureResult whose decoded packets are given: segment i carries kinds_per_segment.get(i, ());
    acks: (time, advertised window) of the receiver's ACKs."""
    packets = []
    for i in range(segments):
        packets.append(
            Packet(
                time=i * 0.001,
                stream=0,
                src="10.0.0.2:80",
                dst="10.0.0.1:5000",
                direction="data",
                seq=1 + i * 1000,
                ack=1,
                window=65536,
                peer_window=2000,
                len=1000,
                bytes_in_flight=in_flight,
                flags="A",
                expert=tuple(kinds_per_segment.get(i, ())),
            )
        )
    for t, window in acks:
        packets.append(
            Packet(
                time=t,
                stream=0,
                src="10.0.0.1:5000",
                dst="10.0.0.2:80",
                direction="ack",
                seq=1,
                ack=1,
                window=window,
                peer_window=None,
                len=0,
                bytes_in_flight=None,
                flags="A",
                expert=(),
            )
        )
    packets.sort(key=lambda p: p.time)
    capture = CaptureResult(tmp_path / "synthetic.pcap", "server/veth-rtr", "tcp", 134)
    capture.__dict__["packets"] = packets  # what tshark would have decoded
    return capture


class _Result:
    """A transfer result with conditions and a capture."""

    def __init__(self, capture):
        self.capture = capture

    def describe(self):
        return "link: both ways: 10 ms (RTT 20 ms)"


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    # Failure messages draw plots when matplotlib is there; these tests check the words only.
    from pytest_tcpnet.analysis import plots

    monkeypatch.setattr(plots, "plot_result", lambda result, directory: [directory / "timeseq.png"])


def test_window_full_failure_shows_counts_packets_conditions_and_paths(tmp_path):
    result = _Result(_capture(tmp_path, {i: ["window_full"] for i in range(10, 20)}))
    with pytest.raises(AssertionError) as failure:
        assert_no_window_full(result)
    message = str(failure.value)
    assert message.startswith("10 TCP Window Full events")
    assert "counts: window_full 10, zero_window 0" in message
    assert message.count("[window_full]") == 5  # the first five offending packets
    assert "seq=10001" in message and "peer_win=2000" in message
    assert "link: both ways: 10 ms" in message and "synthetic.pcap" in message and "timeseq.png" in message
    assert_window_full(result, at_least=10)
    with pytest.raises(AssertionError, match="10 TCP Window Full events, expected at least 11"):
        assert_window_full(result, at_least=11)


def test_zero_window_and_retransmission_checks(tmp_path):
    quiet = _capture(tmp_path, {})
    assert_no_retransmissions(quiet)
    with pytest.raises(AssertionError, match="0 TCP ZeroWindow events, expected at least 1"):
        assert_zero_window(quiet)
    noisy = _capture(tmp_path, {3: ["retransmission", "fast_retransmission"]})
    with pytest.raises(AssertionError, match="retransmission 1, fast_retransmission 1, spurious_retransmission 0"):
        assert_no_retransmissions(noisy)


def test_loss_signature_bounds(tmp_path):
    # 1000 segments, 10 resent (6 flagged retransmission, 4 out-of-order) and 12 dup acks: 1% loss fits.
    kinds = {i: ["retransmission"] for i in range(6)}
    kinds.update({i: ["out_of_order"] for i in range(6, 10)})
    kinds.update({i: ["duplicate_ack"] for i in range(100, 112)})
    capture = _capture(tmp_path, kinds, segments=1000)
    assert capture.resent_segments == 10
    assert_loss_signature(capture, 0.01, factor=3)
    with pytest.raises(AssertionError, match=r"resent segment rate 1\.000% .* not within 3\.333%\.\.30\.000%"):
        assert_loss_signature(capture, 0.10, factor=3)
    for bad in (dict(loss=0), dict(loss=1.5), dict(loss=0.01, factor=1)):
        with pytest.raises(ValueError):
            assert_loss_signature(capture, **bad)


def test_duplicate_acks_per_loss_scale_with_the_segments_in_flight(tmp_path):
    # A 1%-loss flow with ~150 segments in flight (bbr with a 217 KB window): every segment behind a hole
    # draws a dup ack, so 10 losses in 1000 segments bring ~130 of them (13%, as measured in issue 18).
    kinds = {i: ["retransmission"] for i in range(10)}
    kinds.update({i: ["duplicate_ack"] for i in range(100, 230)})
    wide = _capture(tmp_path, kinds, segments=1000, in_flight=150_000)
    assert wide.segments_in_flight == 150
    assert_loss_signature(wide, 0.01)
    narrow = _capture(tmp_path, kinds, segments=1000, in_flight=2000)  # the same counts with 2 in flight: too many
    with pytest.raises(
        AssertionError,
        match=r"duplicate_ack rate 13\.000% .* not within 0\.333%\.\.6\.000% "
        r"\(loss 1\.00% x 2\.0 segments in flight on average, factor 3\)",
    ):
        assert_loss_signature(narrow, 0.01)
    with pytest.raises(AssertionError, match=r"resent segment rate 1\.000% .* not within 1\.667%\.\.15\.000%"):
        assert_loss_signature(wide, 0.05)  # 1% and 5% are told apart by the resends, whatever the window


def test_window_full_in_start_up_is_forgiven_only_when_asked(tmp_path):
    # The receiver's window grows over the first 20 ms (autotuning a round trip behind cwnd); two Window Full
    # events fall in that time. With a fixed small window it would be full from the start.
    acks = [(0.0, 20_000), (0.010, 60_000), (0.020, 120_000), (0.050, 128_000)]
    early = _capture(tmp_path, {3: ["window_full"], 15: ["window_full"]}, acks=acks)
    with pytest.raises(AssertionError, match="^2 TCP Window Full events: "):
        assert_no_window_full(early)
    assert_no_window_full(early, after="slow_start")
    assert_no_window_full(early, after=0.016)
    late = _capture(tmp_path, {3: ["window_full"], 60: ["window_full"]}, acks=acks)
    with pytest.raises(
        AssertionError,
        match=r"^1 TCP Window Full events after 20\.0 ms \(slow_start; 1 before it\)"
        r"(.|\n)*first window_full packets:\n  t=0\.060000s",
    ):
        assert_no_window_full(late, after="slow_start")
    for bad in ("steady", -1, True):
        with pytest.raises(ValueError, match="after"):
            assert_no_window_full(early, after=bad)


def test_without_a_capture_the_message_says_how_to_get_one():
    class Bare:
        capture = None

        def describe(self):
            return "link: no rate limit"

    with pytest.raises(AssertionError, match=r"transfer\(\.\.\., capture=True\).*Capture\(pair\.server\)"):
        assert_zero_window(Bare())
    with pytest.raises(ValueError, match="at_least"):
        assert_window_full(Bare(), at_least=0)
