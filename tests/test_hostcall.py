"""Host calls of a --tcpnet-vm guest (vm/hostcall.py): framing, and the runner's server with real tshark and plots.

The guest's end (the virtio port) is tested in a real boot: tests/test_vm.py's test_session_runs_in_vm.
"""

import json
import os
import socket

import pytest

from pytest_tcpnet import Capture, Host
from pytest_tcpnet.analysis import plots
from pytest_tcpnet.capture import decode
from pytest_tcpnet.vm import hostcall


def test_frames_round_trip_in_any_pieces():
    frames = [({"id": "a", "op": "plot"}, b"x" * 70_000), ({"id": "b"}, b""), ({"id": "c", "n": [1, 2]}, b"\0\1")]
    stream = b"".join(hostcall.encode(h, p) for h, p in frames)
    for piece in (1, 7, 4096, len(stream)):
        reader, got = hostcall.FrameReader(), []
        for i in range(0, len(stream), piece):
            reader.feed(stream[i : i + piece])
            while (frame := reader.next()) is not None:
                got.append(frame)
        assert got == frames and not reader.partial


def test_reader_skips_garbage_and_broken_frames_to_the_next_one():
    good = hostcall.encode({"id": "ok"}, b"payload")
    oversized = hostcall.MAGIC + (hostcall.MAX_HEADER + 1).to_bytes(4, "big") + (0).to_bytes(8, "big")
    not_json = hostcall.encode({"id": "x"})[: hostcall._PREFIX.size] + b"{not json"
    reader = hostcall.FrameReader()
    reader.feed(b"noise" + oversized + not_json + good)
    assert reader.next() == ({"id": "ok"}, b"payload")
    assert reader.next() is None


class _Client:
    """What the guest's port looks like from the host: one stream into the server's socket."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(path)
        self.reader = hostcall.FrameReader()

    def ask(self, header, payload=b""):
        self.sock.sendall(hostcall.encode(header, payload))
        while (frame := self.reader.next()) is None:
            data = self.sock.recv(1 << 16)
            assert data, "server closed the connection"
            self.reader.feed(data)
        return frame


@pytest.fixture
def server(tmp_path):
    srv = hostcall.Server(str(tmp_path / "hostcall.sock")).start()
    yield srv
    srv.close()
    assert not (tmp_path / "hostcall.sock").exists()


@pytest.fixture
def guest_side(server, monkeypatch):
    """The guest's decode and plots handed to the server, with a socket where the guest has its port."""
    client = _Client(server.path)
    monkeypatch.setattr(
        hostcall,
        "call",
        lambda op, header=None, payload=b"", timeout=0: client.ask({**(header or {}), "id": "g", "op": op}, payload),
    )
    decode.run_elsewhere(hostcall.decode_on_host)
    plots.draw_elsewhere(hostcall.draw_on_host)
    yield server
    decode.run_elsewhere(None)
    plots.draw_elsewhere(None)


@pytest.fixture
def tiny_rmem_capture(tcpnet, tmp_path):
    pair = tcpnet.pair(client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}))
    with Capture(pair.server, directory=tmp_path) as cap:
        pair.transfer(nbytes=200_000)
    return cap.result.pcap


@pytest.mark.tcpnet_needs("privilege", "tshark")
def test_server_runs_tshark_exactly_as_it_runs_here(tiny_rmem_capture, server):
    client = _Client(server.path)
    client.sock.sendall(b"stray bytes of a guest process killed mid-write")
    reply, out = client.ask({"id": "1", "op": "decode_pcap", "timeout": 60}, tiny_rmem_capture.read_bytes())
    assert reply["ok"] and reply["id"] == "1" and reply["returncode"] == 0, reply
    assert out.decode() == decode.run_tshark(tiny_rmem_capture)[1]
    # A pcap tshark cannot read: its exit status and message come back, as a local run gives them.
    reply, out = client.ask({"id": "2", "op": "decode_pcap"}, b"not a pcap")
    assert reply["ok"] and reply["returncode"] != 0 and reply["stderr"] and out == b""
    assert server.calls == 2


@pytest.mark.tcpnet_needs("privilege", "tshark")
def test_a_guest_decoding_on_the_host_gets_the_same_packets(tiny_rmem_capture, guest_side):
    remote = decode.decode_pcap(tiny_rmem_capture)
    bad = tiny_rmem_capture.parent / "bad.pcap"
    bad.write_bytes(b"not a pcap")
    with pytest.raises(RuntimeError, match="tshark could not decode .*bad.pcap: exit 2"):
        decode.decode_pcap(bad)
    assert guest_side.calls == 2
    decode.run_elsewhere(None)
    assert remote == decode.decode_pcap(tiny_rmem_capture) and len(remote) > 100
    assert any("window_full" in p.expert for p in remote)


def test_server_draws_plots_from_plain_data(tmp_path, server):
    pytest.importorskip("matplotlib")
    data = {
        "rate": [[0.1, 1e6], [0.2, 3e6], [0.3, 2e6]],
        "smoothed": None,
        "predicted_bps": 2e6,
        "predicted_label": "model (rwnd)",
        "interval": 0.1,
        "title": "a test",
    }
    reply, png = _Client(server.path).ask({"id": "p", "op": "plot", "kind": "throughput"}, json.dumps(data).encode())
    assert reply == {"id": "p", "ok": True} and png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000


@pytest.mark.tcpnet_needs("privilege", "tshark")
def test_a_guest_gets_every_plot_of_a_result_from_the_host(tiny_rmem_capture, tmp_path, guest_side):
    pytest.importorskip("matplotlib")
    from pytest_tcpnet.capture import CaptureResult

    capture = CaptureResult(pcap=tiny_rmem_capture, point="server/veth-rtr")
    paths = plots.plot_result(capture, tmp_path / "plots")
    assert [p.name.split("-")[-1] for p in paths] == ["timeseq.png", "windows.png", "throughput.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in paths)
    assert guest_side.calls == 1 + 3  # the decode and three plots, none drawn here


def test_server_refuses_what_it_does_not_offer(server):
    client = _Client(server.path)
    reply, _ = client.ask({"id": "u", "op": "run", "argv": ["sh", "-c", "true"]})
    assert reply == {"id": "u", "ok": False, "error": "unknown host call 'run'"}
    reply, _ = client.ask({"id": "k", "op": "plot", "kind": "pie"}, b"{}")
    assert not reply["ok"] and "no plot named 'pie'" in reply["error"]


def test_outside_a_guest_nothing_is_handed_over(monkeypatch):
    from pytest_tcpnet import vm

    monkeypatch.setenv(hostcall.ENV, "1")
    monkeypatch.delenv(vm.IN_VM_ENV, raising=False)
    assert not vm.use_host_for_analysis()
    monkeypatch.setenv(vm.IN_VM_ENV, "1")
    monkeypatch.setattr(hostcall, "_port", "")  # a guest without the port (a vng boot)
    assert not vm.use_host_for_analysis() and decode._elsewhere is None and plots._elsewhere is None
    with pytest.raises(hostcall.Unavailable, match="no host-call port"):
        hostcall.call("decode_pcap")


def test_a_socket_path_too_long_is_refused_before_anything_is_created(tmp_path):
    path = tmp_path / ("x" * 120)
    with pytest.raises(hostcall.Unavailable, match="too long"):
        hostcall.Server(str(path))
    assert not os.path.exists(path)
