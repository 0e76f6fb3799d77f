"""One start for every flow of a measurement: the start gate holds each flow's sender until every workload has
started, so flows asked to run at once do, however long their programs take to start one after another."""

import os
import subprocess
import sys
import time

import pytest

import pytest_tcpnet
from pytest_tcpnet import Flow, Link
from pytest_tcpnet.measure.gate import StartGate
from pytest_tcpnet.workload.iperf3 import Iperf3
from pytest_tcpnet.workload.requests import RequestResponse

_WAITER = """
import sys
from pytest_tcpnet.workload.flows import wait_at_start_gate

class Conn:
    def send(self, message):
        print(message["event"], flush=True)

try:
    wait_at_start_gate(Conn(), sys.argv[1], float(sys.argv[2]))
except TimeoutError as exc:
    print("timeout:", exc, flush=True)
    sys.exit(3)
print("through", flush=True)
"""


def _waiter(path, timeout):
    process = subprocess.Popen(
        [sys.executable, "-c", _WAITER, path, str(timeout)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # a traceback belongs in the assertion that fails on it
        text=True,
        # This checkout's package, whichever one the interpreter would import by itself.
        env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(pytest_tcpnet.__file__))},
    )
    assert process.stdout.readline() == "gated\n"
    return process


def _rest(process, timeout=10):
    """What the waiter printed after "gated", once it has exited. Not communicate(timeout=...): that reads the pipe
    itself and loses what readline() buffered (a waiter that passed at once wrote both lines together)."""
    process.wait(timeout)
    return process.stdout.read()


def test_a_waiter_goes_when_the_gate_opens_and_not_before():
    with StartGate() as gate:
        waiters, late = [_waiter(gate.path, 30) for _ in range(2)], None
        try:
            time.sleep(0.3)
            assert [w.poll() for w in waiters] == [None, None]
            gate.open()
            assert [_rest(w) for w in waiters] == ["through\n"] * 2
            late = _waiter(gate.path, 30)  # one that comes once it is open goes at once
            assert _rest(late) == "through\n"
        finally:
            for w in [*waiters, *([late] if late else [])]:
                w.kill()
                w.wait()
                w.stdout.close()
    assert not os.path.exists(os.path.dirname(gate.path))  # nothing left behind


def test_a_gate_never_opened_times_its_waiter_out_by_name():
    with StartGate() as gate:
        waiter = _waiter(gate.path, 0.3)
        try:
            out = _rest(waiter)
        finally:
            waiter.kill()
            waiter.wait()
            waiter.stdout.close()
        assert waiter.returncode == 3 and f"the start gate {gate.path} was not opened in 0.3 s" in out, out


def test_closing_a_gate_nobody_opened_lets_its_waiters_go_and_removes_it():
    gate = StartGate()
    waiter = _waiter(gate.path, 30)
    try:
        # "gated" comes just before the waiter opens the FIFO: give it time to get there (a waiter that comes after
        # the gate is gone fails, FileNotFoundError: its measurement is over).
        time.sleep(0.3)
        gate.close()
        assert _rest(waiter) == "through\n"
    finally:
        waiter.kill()
        waiter.wait()
        waiter.stdout.close()
    assert not os.path.exists(os.path.dirname(gate.path))


def test_flows_asked_to_start_at_once_are_held_until_the_last_has_connected(tcpnet):
    """Three servers of a star, one flow each: every flow's sender waits at the gate, which opens once the third
    has connected, so none writes before the last has come to the gate. That order is what the gate guarantees,
    and is judged. How close together the first bytes then arrive is the scheduler's: measured on the host, 5 runs
    each, 0-0.4 ms apart quiet, 0-1.7 ms beside a CPU hog on both cores, 11.3 ms in a fresh-clone CI run's host
    session beside the hog and the other xdist worker (run 15; three woken senders wait their turn for a CPU); without
    the gate 9.8-15.7 ms quiet (the third pair's programs started last); under UML, whose one CPU wakes the senders one
    after another, 33-89 ms."""
    star = tcpnet.star(servers=3, links=Link(rate="20mbit"))
    result = star.concurrent([Flow(duration=1.0) for _ in range(3)])
    senders = [flow.sender for flow in result.flows]
    gated = [end.extra["gated_at"] for end in senders]
    released = [end.extra["released_at"] for end in senders]
    firsts = [flow.first_byte_at for flow in result.flows]
    seen = (
        f"came to the gate at {[round(t - min(gated), 4) for t in gated]} s, went through at "
        f"{[round(t - min(gated), 4) for t in released]} s; first bytes {[round(t - min(gated), 4) for t in firsts]} s"
    )
    assert max(gated) < min(released), seen
    assert all(end.first_write_at >= end.extra["released_at"] for end in senders), seen


@pytest.mark.tcpnet_needs("iperf3")
@pytest.mark.parametrize("use_bindings", [True, False], ids=["libiperf", "iperf3 -J"])
def test_iperf3_and_request_response_clients_wait_at_the_gate_too(tcpnet, use_bindings):
    """iperf3 (through libiperf, or its command line) and the request/response client on three servers of a star
    at once: each client is set up (its process forked, libiperf loaded) and waits at the gate before it connects,
    so none goes through before the last has come (the order the gate guarantees, judged as for bulk flows)."""
    star = tcpnet.star(servers=3, links=Link(rate="20mbit"))
    workloads = [
        Iperf3(duration=1, use_bindings=use_bindings),
        RequestResponse(5, response_size=100_000),
        Iperf3(duration=1, direction="upload", use_bindings=use_bindings),
    ]
    first, exchanged, last = star.run(workloads)
    (requests,) = exchanged.results
    clients = [first.flows[0].receiver, last.flows[0].sender]  # a download's client receives, an upload's sends
    gated = [end.extra["gated_at"] for end in clients] + [requests.gated_at]
    released = [end.extra["released_at"] for end in clients] + [requests.released_at]
    seen = (
        f"came to the gate at {[round(t - min(gated), 4) for t in gated]} s, went through at "
        f"{[round(t - min(gated), 4) for t in released]} s"
    )
    assert max(gated) < min(released), seen
