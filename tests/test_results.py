"""Result arithmetic on made-up flows (no privileges): goodput, active rate, rate series, EWMA, fairness, the fake workload."""

import dataclasses

import pytest

from pytest_tcpnet.results import jain_index
from pytest_tcpnet.workload.base import FlowOutcome
from pytest_tcpnet.workload.fake import FakeWorkload, fake_records, fake_result


def test_goodput_excludes_the_first_read():
    result = fake_result(nbytes=1_000_000, duration_s=1.0)
    assert result.throughput_bps == 8e6
    first_read = fake_result(nbytes=1_000_000, duration_s=1.0)
    first_read = dataclasses.replace(first_read, receiver=first_read.receiver.replace(first_read=100_000))
    assert first_read.throughput_bps == pytest.approx(0.9 * 8e6)


def test_active_rate_uses_busy_time():
    result = fake_result(nbytes=1_000_000, duration_s=3.0, sender_tcp_info={"busy_time": 1_000_000})
    assert result.active_throughput_bps == 8e6 and result.throughput_bps == pytest.approx(8e6 / 3)
    assert fake_result().active_throughput_bps is None


def test_rate_series_interpolates_checkpoints():
    checkpoints = [(100.0, 0), (100.5, 1_000_000), (101.0, 1_000_000)]
    result = fake_result(nbytes=1_000_000, duration_s=1.0, checkpoints=checkpoints)
    series = result.rate_series(0.25)
    assert [t for t, _ in series] == [0.25, 0.5, 0.75, 1.0]
    assert [bps for _, bps in series] == [16e6, 16e6, 0.0, 0.0]
    smoothed = result.ewma_series(0.25, alpha=0.5)
    assert [bps for _, bps in smoothed] == [16e6, 16e6, 8e6, 4e6]
    with pytest.raises(ValueError, match="interval"):
        result.rate_series(0)
    with pytest.raises(ValueError, match="source"):
        result.rate_series(0.1, source="wire")


def _sampled(result, receiver_rows, interval=0.01):
    """Give a fake result sampled receiver rows [(monotonic t, {field: value})] (the sender has none)."""
    from pytest_tcpnet.measure.sampler import SocketSamples
    from pytest_tcpnet.records import SERIES_FIELDS

    local, remote = ("198.18.0.2", 40000), ("198.19.0.2", 5001)
    rows = [(t, tuple(values.get(f) for f in SERIES_FIELDS)) for t, values in receiver_rows]
    return dataclasses.replace(
        result,
        receiver=result.receiver.replace(local=local, remote=remote),
        samples=SocketSamples({("client", local, remote): rows}, interval),
    )


def test_a_burst_before_the_first_sample_counts_in_the_socket_rate():
    # All 60 KB reached the kernel before the first sample, and the application's connect() returned
    # (connected_at) only after that sample: the burst still shows, in the first interval.
    result = fake_result(nbytes=60_000, duration_s=3.0)
    result = dataclasses.replace(result, receiver=result.receiver.replace(connected_at=100.02, first_byte_at=100.02))
    result = _sampled(
        result,
        [
            (100.015, {"bytes_received": 60_000}),
            (100.5, {"bytes_received": 60_000}),
            (103.0, {"bytes_received": 60_000}),
        ],
    )
    series = result.rate_series(0.1, source="socket")
    assert series[0][1] == pytest.approx(60_000 * 8 / 0.1)  # from the sample before (10 ms earlier)
    assert [bps for _, bps in series[1:]] == [0.0] * (len(series) - 1)


def test_unread_bytes_are_what_the_socket_took_in_beyond_the_reader_s_reads():
    # The kernel took 4 KB in at once; the reader read 1 KB every 100 ms from 100.1 s on.
    checkpoints = [(100.0, 0), (100.1, 1024), (100.2, 2048), (100.3, 3072), (100.4, 4096)]
    result = fake_result(nbytes=4096, duration_s=0.4, checkpoints=checkpoints)
    result = dataclasses.replace(result, receiver=result.receiver.replace(connected_at=100.0, first_byte_at=100.0))
    result = _sampled(result, [(100.05, {"bytes_received": 4096}), (100.25, {"bytes_received": 4096})])
    unread = result.unread_series()
    assert [t for t, _ in unread] == pytest.approx([0.0, 0.05, 0.25])
    assert [b for _, b in unread] == pytest.approx([0, 4096 - 512, 4096 - 2560])
    # No reader's clock (curl's, a user's program's): nothing to compare the socket with.
    assert fake_result().unread_series() == []
    assert dataclasses.replace(result, receiver=result.receiver.replace(checkpoints=None)).unread_series() == []


def test_jain_index():
    assert jain_index([10, 10]) == 1.0
    assert jain_index([10, 0]) == 0.5
    with pytest.raises(ValueError):
        jain_index([])


def test_series_without_samples_is_empty_and_names_the_fields():
    result = fake_result()
    assert result.series("snd_cwnd") == []
    with pytest.raises(ValueError, match="snd_cwnd"):
        result.series("cwnd")


def test_the_fake_workload_follows_the_contract():
    workload = FakeWorkload(lambda pair: [FlowOutcome(*fake_records(nbytes=10, duration_s=1.0), sender_role="server")])
    workload.start(pair=None, deadline=0)
    (outcome,) = workload.wait(deadline=0)
    workload.stop()
    assert workload.started and workload.stopped and outcome.receiver["nbytes"] == 10


def test_the_counters_that_explain_a_stall_are_in_the_description():
    from pytest_tcpnet.workload.fake import fake_result

    result = fake_result(
        tcp_counters={"client": {"TcpExt.DelayedACKs": 200, "Tcp.RetransSegs": 3}, "server": {"TcpExt.TCPTimeouts": 1}}
    )
    assert result.key_counters() == "client DelayedACKs 200; server TCPTimeouts 1"
    assert "kernel counters during the measurement: client DelayedACKs 200; server TCPTimeouts 1" in result.describe()
    assert "kernel counters" not in fake_result().describe()


def test_a_workload_s_record_becomes_a_typed_end_that_still_reads_as_a_mapping():
    from pytest_tcpnet.records import ConnectionEnd

    record = {"event": "result", "role": "receiver", "nbytes": 5, "local": ["198.18.0.2", 40000], "timing": {"x": 1}}
    result = fake_result(nbytes=5)
    result = dataclasses.replace(result, receiver=record)
    end = result.receiver
    assert isinstance(end, ConnectionEnd) and end.local == ("198.18.0.2", 40000) and end.role == "receiver"
    assert end.extra == {"timing": {"x": 1}} and "event" not in end  # the message's kind is not part of the end
    # Read as a mapping, as tests written against the dict records do: a None field is absent.
    assert end["nbytes"] == 5 and end["timing"] == {"x": 1} and end.get("last_byte_at", 0.0) == 0.0
    assert "last_byte_at" not in end and end["tcp_info"] == {}
    with pytest.raises(KeyError):
        end["last_byte_at"]
    assert ConnectionEnd.from_record(end) is end and dict(ConnectionEnd()) == {
        "between_samples": False,
        "tcp_info": {},
        "buffers": {},
        "buffers_at_connect": {},
    }


def test_a_socket_sample_is_a_typed_row_in_the_series_order():
    """The sampler's rows are records.SocketSamples: fields by the kernel's names, in SERIES_FIELDS order (a tuple, so
    a series column is an index), and tcp_info() the TCP_INFO part the kernel reported."""
    from pytest_tcpnet.measure.observe import first_value, last_tcp_info, sampled_values
    from pytest_tcpnet.records import SERIES_FIELDS, SKMEM_FIELDS, SocketSample

    assert SocketSample._fields == SERIES_FIELDS
    early = SocketSample(state=1, rtt=20_000, rcvbuf=131_072, busy_time=10)
    late = SocketSample(state=1, rtt=21_000, rcvbuf=262_144, drops=0)  # a closed socket's last: no chrono counters
    assert early[SERIES_FIELDS.index("rtt")] == 20_000 and early.tcp_info() == {
        "state": 1,
        "rtt": 20_000,
        "busy_time": 10,
    }
    assert not set(late.tcp_info()) & set(SKMEM_FIELDS)
    values = sampled_values([(0.0, tuple(early)), (0.1, tuple(late))])  # rows as plain tuples too
    assert values == [early, late] and all(isinstance(v, SocketSample) for v in values)
    assert (first_value(values, "rcvbuf"), first_value(values[::-1], "rcvbuf")) == (131_072, 262_144)
    assert last_tcp_info(values)["rtt"] == 20_000  # the last with the chrono counters
