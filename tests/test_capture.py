"""Capture against real namespaces, dumpcap and tshark: readiness, flushing, wire-sized frames, expert events."""

import pytest

from pytest_tcpnet import Host, Lab, LabError, Link, Pause
from pytest_tcpnet.assertions.events import assert_no_window_full, assert_window_full, assert_zero_window
from pytest_tcpnet.capture import DEFAULT_SNAPLEN, Capture, CaptureResult

pytestmark = [pytest.mark.tcpnet_needs("privilege"), pytest.mark.tcpnet_needs("tshark")]

TINY_RMEM = Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"})
# Default autotuning starts from a ~77 KB window, which a 0 ms flow fills once in its first
# millisecond (measured: exactly 1 Window Full in 3 of 3 runs); a 1 MB initial buffer never is.
TUNED_RMEM = Host(sysctls={"net.ipv4.tcp_rmem": "4096 1048576 6291456"})


def test_capture_is_ready_before_and_flushed_after_the_flow(tcpnet, tmp_path):
    pair = tcpnet.pair()
    with Capture(pair.server, directory=tmp_path) as cap:
        transfer = pair.transfer(nbytes=2_000_000)
    result = cap.result
    assert result.pcap.parent == tmp_path and result.point == "server/veth-rtr"
    assert result.dropped == 0 and result.received == len(result.packets)
    # A take void beside hypervisor steal ran its own connection on this interface (a rootless CI run's capture held
    # two, retaken beside 0.14 CPUs of steal): one connection per take, and the kept take's is judged.
    streams = sorted({p.stream for p in result.packets})
    assert len(streams) == 1 + len(transfer.void_takes), (streams, transfer.describe())
    own = result.for_connection(transfer.sender.local, transfer.sender.remote)
    flags = [p.flags for p in own.packets]
    # The SYN (first packet, so it was live before the connect) and both FINs (so nothing was left unflushed).
    assert flags[0] == "S" and sum("F" in f for f in flags) == 2, "\n".join(
        f"{p.flags:3} {p.brief()}" for p in own.packets if p.flags != "A"
    )
    assert own.data_bytes == 2_000_000, own.describe()  # every byte, up to the last, was flushed to the file


def test_captured_interface_carries_wire_sized_packets(tcpnet, tmp_path):
    # The lab's "wire" offload policy: TSO off at the endpoints, so the capture (and the router) see
    # MTU-sized segments, not 64 KB super-packets; tshark's per-segment analysis depends on it.
    pair = tcpnet.pair()
    assert pair.offloads["server/veth-rtr"]  # the policy was applied and recorded for this interface
    with Capture(pair.server, directory=tmp_path) as cap:
        pair.transfer(nbytes=3_000_000)
    sizes = [p.len for p in cap.result.packets if p.direction == "data"]
    assert len(sizes) > 2000 and max(sizes) <= 1448  # MTU 1500 - IP 20 - TCP 32 (timestamps)
    # Headers only: the pcap holds at most snaplen bytes (+16 of pcap record header) per packet.
    assert cap.result.pcap.stat().st_size <= 24 + len(cap.result.packets) * (DEFAULT_SNAPLEN + 16)


def test_window_full_under_a_tiny_client_rmem_and_not_when_tuned(tcpnet, tmp_path):
    """C3/C9 on the host (0 ms RTT); examples/test_rmem_vs_wmem.py has the 10 ms VM version."""
    tiny, tuned = tcpnet.pair(client=TINY_RMEM), tcpnet.pair(client=TUNED_RMEM)
    with Capture(tiny.server, directory=tmp_path) as small:
        tiny.transfer(nbytes=500_000)
    with Capture(tuned.server, directory=tmp_path) as big:
        tuned.transfer(nbytes=500_000)
    # Measured: ~300 Window Full in ~650 data segments (the 1.5 KB window holds two 768 B segments).
    assert_window_full(small.result, at_least=50)
    assert_no_window_full(big.result)
    with pytest.raises(AssertionError) as failure:
        assert_no_window_full(small.result)
    message = str(failure.value)
    assert "TCP Window Full events" in message and "window_full" in message
    assert "peer_win=" in message.split("first window_full packets:")[1]  # the window the sender filled
    assert str(small.result.pcap) in message


def _window_full_share_after_start_up(result):
    """Window Full events after the receiver's window first reached 90% of its largest, per data segment."""
    capture = result.capture
    windows = [(p.time, p.window) for p in capture.packets if p.direction == "ack"]
    largest = max(w for _, w in windows)
    start = next(t for t, w in windows if w >= 0.9 * largest)
    flagged = sum(1 for p in capture.packets if "window_full" in p.expert and p.time >= start)
    return flagged / capture.data_segments


def test_window_full_after_start_up_tells_an_autotuned_flow_from_a_tiny_window(tcpnet):
    # Default autotuning on a fast path, quiet host: 0-2 Window Full, all in the first 1-3 ms, while the
    # receiver's window reached 90% of its largest after 14-330 ms (9 transfers at 0.5, 1 Gbit/s and
    # unshaped): assert_no_window_full(after="slow_start") holds. Beside a CPU hog a rootless CI run's
    # reader fell behind four times later on (4 of 13816 data segments, 0.03%): real Window Full events,
    # rightly reported, so the claim here is the share. The tiny window fills on half its segments (0.497).
    default = tcpnet.pair(link=Link(rate="1gbit")).transfer(nbytes=20_000_000, capture=True)
    assert _window_full_share_after_start_up(default) <= 0.001, default.capture.describe()
    tiny = tcpnet.pair(link=Link(rate="1gbit"), client=TINY_RMEM).transfer(nbytes=500_000, capture=True)
    assert _window_full_share_after_start_up(tiny) >= 0.1, tiny.capture.describe()
    with pytest.raises(AssertionError, match=r"TCP Window Full events after .* ms \(slow_start; \d+ before it\)"):
        assert_no_window_full(tiny, after="slow_start")


def test_pausing_reader_gives_zero_window_probes_and_update(tcpnet, tmp_path):
    """C14: the reader stops for 2 s; the persist timer sends probes (first after ~200 ms, then doubling)."""
    pair = tcpnet.pair()
    with Capture(pair.server, directory=tmp_path) as cap:  # the capture object around a workload
        result = pair.transfer(400_000, rcvbuf=16384, reader=Pause(after=50_000, seconds=2.0))
    assert result.nbytes == 400_000
    events = cap.result.events
    assert_zero_window(cap.result)
    # 2 s of pause with the persist timer backing off from 200 ms: measured 3-4 probes.
    assert events["zero_window_probe"] >= 2, cap.result.describe()
    assert events["window_update"] >= 1, cap.result.describe()
    probes = cap.result.offending("zero_window_probe", 10)
    assert probes[-1].time - probes[0].time > 0.5  # spread over the pause, not a burst
    # The stall is named, and lasts about the pause: the window reopens once the reader reads again.
    from pytest_tcpnet.analysis.stalls import find_stalls

    (stall,) = [s for s in find_stalls(cap.result.packets) if s.kind == "zero_window"]
    assert stall.count >= 1 and 1.5 <= max(stall.seconds) <= 3.0, stall.describe()


def test_assertions_without_a_capture_say_how_to_get_one(tcpnet):
    result = tcpnet.pair().transfer(nbytes=100_000)
    assert getattr(result, "capture", None) is None
    with pytest.raises(AssertionError, match=r"capture=True.*with Capture\(pair.server\)"):
        assert_no_window_full(result)


def test_capture_rejects_bad_input_before_starting_anything(tcpnet):
    pair = tcpnet.pair()
    with pytest.raises(ValueError, match="snaplen"):
        Capture(pair.server, snaplen=10)
    with pytest.raises(ValueError, match="filter"):
        Capture(pair.server, filter="tcp\nport 1")
    with pytest.raises(ValueError, match="interface"):
        Capture(pair.server, interface="no such interface")
    with pytest.raises(TypeError, match="node"):
        Capture("server")
    with pytest.raises(LabError, match="did not start capturing.*veth-nope"):
        Capture(pair.server, interface="veth-nope").start()
    with pytest.raises(LabError, match="did not start capturing"):
        Capture(pair.server, filter="not a filter ((").start()
    assert not pair.server.processes.pids()  # a failed start leaves no dumpcap behind


def test_capture_result_decodes_once(tmp_path, tcpnet):
    pair = tcpnet.pair()
    with Capture(pair.server, directory=tmp_path) as cap:
        pair.transfer(nbytes=200_000)
    reopened = CaptureResult(cap.result.pcap, cap.result.point)
    assert reopened.packets is reopened.packets and reopened.events == cap.result.events
    with pytest.raises(ValueError, match="kind"):
        reopened.offending("window_ful")


def test_lab_close_stops_a_running_capture():
    with Lab() as lab:
        pair = lab.pair()
        cap = Capture(pair.server).start()
        proc = cap._proc
    assert proc.poll() is not None  # stopped by pid with the pair


@pytest.mark.parametrize("after_idle", [1, 0], ids=["restart", "no-restart"])
def test_a_writer_pause_past_the_rto_restarts_slow_start_unless_told_not_to(tcpnet, after_idle):
    """A cubic sender fills a 20 Mbit/s queue, pauses 1 s with everything acknowledged, and writes again: with
    net.ipv4.tcp_slow_start_after_idle=1 (the default) its next flight is the initial window, an idle_restart stall;
    set to 0 on the sender, it keeps its window and nothing is named."""
    from pytest_tcpnet.analysis.stalls import find_stalls

    server = Host(cc="cubic", sysctls={"net.ipv4.tcp_slow_start_after_idle": after_idle})
    pair = tcpnet.pair(link=Link(rate="20mbit"), server=server)
    result = pair.transfer(4_000_000, writer=Pause(after=2_000_000, seconds=1.0), capture=True)
    kinds = {s.kind: s for s in find_stalls(result.capture.packets)}
    if after_idle:
        assert "idle_restart" in kinds and kinds["idle_restart"].count == 1, result.capture.describe()
    else:
        assert "idle_restart" not in kinds, kinds["idle_restart"].describe()


def test_an_absence_is_not_judged_on_a_capture_that_misses_packets(tcpnet, tmp_path):
    """A capture whose file lacks packets the kernel handed dumpcap cannot show that something never happened: the
    missing packets may be the ones that did. A real capture of a flow into a 4 KB receive buffer (Window Full from
    its first round trips), cut by editcap just before its first Window Full, with dumpcap's own counts: without
    the check assert_no_window_full would pass on it."""
    import shutil
    import subprocess

    if shutil.which("editcap") is None:
        pytest.skip("editcap (wireshark's) is not installed")
    pair = tcpnet.pair(server=TINY_RMEM)
    with Capture(pair.server, directory=tmp_path) as cap:
        pair.transfer(nbytes=200_000, direction="upload")
    whole = cap.result
    assert whole.missing == 0, whole.describe()  # a complete capture: the file holds all the kernel handed it
    first = next(i for i, p in enumerate(whole.packets) if "window_full" in p.expert)
    cut = tmp_path / "cut.pcapng"
    subprocess.run(["editcap", "-r", str(whole.pcap), str(cut), f"1-{first}"], check=True, capture_output=True)
    lacking = CaptureResult(cut, whole.point, whole.filter, whole.snaplen, received=whole.received, dropped=0)
    assert lacking.events["window_full"] == 0 and lacking.missing == whole.received - first
    with pytest.raises(
        AssertionError, match=rf"cannot judge 'no TCP Window Full': the capture misses {lacking.missing} "
    ):
        assert_no_window_full(lacking)
    with pytest.raises(AssertionError, match=r"0 TCP Window Full events, expected at least 1 \(the capture misses"):
        assert_window_full(lacking)
    assert_window_full(whole)
