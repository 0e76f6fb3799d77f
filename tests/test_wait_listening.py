"""node.wait_listening: a test waits for its own server to be ready, from the kernel's socket table, not by polling it."""

import sys
import time

import pytest

from pytest_tcpnet.errors import LabError

pytestmark = pytest.mark.tcpnet_needs("privilege")

# Listens (TCP or UDP) after a delay, as a real server does once it has loaded; then serves until killed.
SLOW_SERVER = """
import socket, sys, time
time.sleep(float(sys.argv[3]))
kind = socket.SOCK_DGRAM if sys.argv[4] == "udp" else socket.SOCK_STREAM
s = socket.socket(socket.AF_INET, kind)
s.bind((sys.argv[1], int(sys.argv[2])))
if kind == socket.SOCK_STREAM:
    s.listen()
time.sleep(600)
"""


@pytest.mark.parametrize("kind", ["tcp", "udp"])
def test_returns_once_the_server_listens(tcpnet, kind):
    pair = tcpnet.pair()
    started = time.monotonic()
    pair.server.popen([sys.executable, "-c", SLOW_SERVER, pair.server.address, "9000", "0.3", kind])
    pair.server.wait_listening(9000, timeout=10, udp=kind == "udp")
    waited = time.monotonic() - started
    assert 0.3 <= waited < 5, waited  # not before it listened; soon after (polled every <= 50 ms)
    if kind == "tcp":  # and it really is ready: a client connects at once
        pair.client.run(
            [sys.executable, "-c", f"import socket; socket.create_connection(('{pair.server.address}', 9000), 2)"],
            check=True,
        )


def test_a_port_nobody_opens_times_out_naming_the_node_and_port(tcpnet):
    pair = tcpnet.pair()
    with pytest.raises(LabError, match=r"<Node server .*>: nothing listened on TCP port 9001 within 0.3 s"):
        pair.server.wait_listening(9001, timeout=0.3)


def test_a_server_that_died_is_named(tcpnet):
    pair = tcpnet.pair()
    pair.server.popen([sys.executable, "-c", "raise SystemExit(3)"])
    time.sleep(0.5)
    with pytest.raises(LabError, match=r"exited here meanwhile: .*python.* \(exit 3\)"):
        pair.server.wait_listening(9002, timeout=0.3)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(port=0), "port: must be a port number in 1..65535, got 0"),
        (dict(port="9000"), "port: must be a port number in 1..65535, got '9000'"),
        (dict(port=9000, timeout=0), "timeout: must be a number of seconds in (0, 3600], got 0"),
    ],
)
def test_bad_arguments_are_refused(tcpnet, kwargs, words):
    pair = tcpnet.pair()
    with pytest.raises(ValueError) as refused:
        pair.server.wait_listening(**kwargs)
    assert words in str(refused.value)
