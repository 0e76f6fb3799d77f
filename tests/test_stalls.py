"""The stall finder's rules on hand-made packet lists (the real flows are in test_observe.py and test_capture.py)."""

from pytest_tcpnet.analysis.stalls import find_stalls
from pytest_tcpnet.capture.decode import Packet

A, B = "198.18.0.2:40000", "198.19.0.2:9000"


def _p(time, src, seq=1, ack=1, length=0, flags="A", expert=(), window=65535):
    dst = B if src == A else A
    return Packet(time, 0, src, dst, "data" if src == A else "ack", seq, ack, window, None, length, None, flags, expert)


def test_a_retransmission_after_a_silence_is_a_timeout_and_a_quick_one_is_not():
    packets = [
        _p(0.000, A, seq=1, length=1000),
        _p(0.001, B, ack=1001),
        _p(0.002, A, seq=1001, length=1000),
        _p(0.302, A, seq=1001, length=1000, expert=("retransmission",)),  # 300 ms of silence: the RTO fired
        _p(0.303, B, ack=2001),
        _p(0.304, A, seq=2001, length=1000),
        _p(0.310, A, seq=2001, length=1000, expert=("retransmission", "fast_retransmission")),
    ]
    (stall,) = find_stalls(packets)
    assert stall.kind == "rto" and stall.count == 1 and abs(stall.seconds[0] - 0.300) < 1e-9


def test_acks_that_come_at_once_are_no_stall_and_counters_alone_name_a_timeout():
    packets = []
    for i in range(20):
        packets += [_p(i * 0.001, A, seq=1 + i * 1000, length=1000), _p(i * 0.001 + 0.0002, B, ack=1001 + i * 1000)]
    assert find_stalls(packets) == []
    (stall,) = find_stalls(None, {"client": {"TcpExt.TCPTimeouts": 2}, "server": {}})
    assert stall.kind == "rto" and stall.count == 2 and stall.seconds == () and "capture=True" in stall.evidence


def test_a_late_ack_answered_by_the_peer_s_own_data_is_no_delayed_ack():
    packets = [
        _p(0.000, A, seq=1, length=8),
        _p(0.0002, B, ack=9),
        _p(0.001, A, seq=9, length=100),
        _p(0.050, B, seq=1, ack=109, length=108),  # the answer carries the ACK: nothing waited on a timer
        _p(0.051, A, seq=109, length=8, ack=109),
    ]
    assert [s.kind for s in find_stalls(packets)] == []


def _header_body_exchanges(late_acks):
    """Header/body writes whose header's pure ACK comes after each given extra wait, the body leaving right after."""
    packets, t, seq = [], 0.0, 1
    for extra in late_acks:
        packets += [_p(t, A, seq=seq, length=8), _p(t + 0.001 + extra, B, ack=seq + 8)]
        packets += [_p(t + 0.0015 + extra, A, seq=seq + 8, length=100), _p(t + 0.003 + extra, B, seq=1, ack=seq + 108)]
        t, seq = t + 0.1, seq + 108
    return packets


def test_slow_pure_acks_are_named_delayed_only_as_often_as_the_delayed_ack_timer_fired():
    packets = _header_body_exchanges([0.0, 0.040, 0.0258, 0.041])
    # Without counters, every slow pure ACK that released the next write is named.
    (stall,) = find_stalls(packets)
    assert stall.kind == "delayed_ack" and stall.count == 3
    # The timer fired twice: the two longest waits are its, the 25.8 ms one was late for another reason.
    (stall,) = find_stalls(packets, {"client": {}, "server": {"TcpExt.DelayedACKs": 2}})
    assert stall.count == 2 and sorted(round(s, 4) for s in stall.seconds) == [0.04, 0.041], stall.seconds
    assert "1 more slow ACK(s)" in stall.evidence and "DelayedACKs rose by 2" in stall.evidence, stall.evidence
    # The timer never fired (TCP_NODELAY on a busy host): no delayed_ack stall at all.
    assert find_stalls(packets, {"client": {}, "server": {}}) == []


def test_a_sender_held_by_the_receiver_s_window_most_of_its_time_is_receiver_limited():
    # busy_time is the kernel's total of its three chronos, rwnd_limited included.
    (stall,) = find_stalls(None, None, {"rwnd_limited": 1_500_000, "busy_time": 2_000_000, "sndbuf_limited": 0})
    assert stall.kind == "receiver_limited" and stall.seconds == (1.5,) and "75%" in stall.evidence
    # Slow start's moments on an autotuned receiver are not a stall: too short, or too small a share.
    assert find_stalls(None, None, {"rwnd_limited": 5_000, "busy_time": 6_000}) == []
    assert find_stalls(None, None, {"rwnd_limited": 400_000, "busy_time": 2_000_000}) == []


def _flight(time, seq, length, in_flight):
    return Packet(time, 0, A, B, "data", seq, 1, 65535, None, length, in_flight, "A", ())


def test_a_sender_idle_past_the_rto_that_restarts_from_the_initial_window_is_named():
    syn = [_p(0.0, A, seq=0, flags="S"), _p(0.010, B, seq=0, flags="SA"), _p(0.020, A, flags="A")]
    before = [_flight(0.1 + i * 0.001, 1 + i * 1448, 1448, (i + 1) * 1448) for i in range(40)]  # 40 in flight
    acked = [_p(0.2, B, ack=1 + 40 * 1448)]
    after = [_flight(1.2 + i * 0.0001, 1 + (40 + i) * 1448, 1448, (i + 1) * 1448) for i in range(10)]  # 10: IW
    (stall,) = find_stalls(syn + before + acked + after)
    # 40 segments again from 10: two doublings, at the handshake's 10 ms round trip.
    assert stall.kind == "idle_restart" and stall.count == 1 and stall.seconds == (0.020,), stall.describe()
    # The same pause without the restart (a flight as large as before) is no stall.
    kept = [_flight(1.2 + i * 0.0001, 1 + (40 + i) * 1448, 1448, (i + 1) * 1448) for i in range(40)]
    assert find_stalls(syn + before + acked + kept) == []
