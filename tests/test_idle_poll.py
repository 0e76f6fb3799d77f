"""While a measurement runs, the machine's idle CPUs are kept polling, not halted (hostload.idle_cpus_polling,
--tcpnet-idle-poll): a PM QoS CPU latency request held by an open file, real on this kernel, and gone with it."""

import os
import struct

import pytest

from pytest_tcpnet import Cbr, Lab, Link, guest, hostload
from pytest_tcpnet.report.rows import result_row
from pytest_tcpnet.results.transfer import machine_lines
from pytest_tcpnet.workload import Bulk

pytest_plugins = ["pytester"]


def _may_request():
    """Whether this process may hold a CPU latency request (root on a kernel with PM QoS), tried for real; None in a
    guest, which leaves it to its runner on the host."""
    if guest.inside_vm():
        return None
    try:
        os.close(os.open(hostload.CPU_LATENCY_DEVICE, os.O_WRONLY))
    except OSError:
        return False
    return True


def _held_by_me():
    """How many of this process's open files are the CPU latency device."""
    fds = os.listdir("/proc/self/fd")
    return sum(1 for fd in fds if _target(fd) == hostload.CPU_LATENCY_DEVICE)


def _target(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _latency_now_us():
    """The machine's CPU latency limit now (the kernel answers a read with the tightest request held)."""
    with open(hostload.CPU_LATENCY_DEVICE, "rb") as device:
        return struct.unpack("=i", device.read(4))[0]


def test_the_request_is_held_for_the_block_and_dropped_after():
    if guest.inside_vm():
        with hostload.idle_cpus_polling() as held:
            assert held is None and _held_by_me() == 0
        pytest.skip("in a guest the runner holds the host's request (vm/runner.py)")
    if not _may_request():
        with hostload.idle_cpus_polling() as held:
            assert held is False and _held_by_me() == 0
        pytest.skip(f"{hostload.CPU_LATENCY_DEVICE}: this process may not hold a request (not root, or no PM QoS)")
    assert _held_by_me() == 0
    with hostload.idle_cpus_polling() as held:
        assert held is True and _held_by_me() == 1
        assert _latency_now_us() == 0  # the kernel's answer: every idle CPU may take no longer than 0 us to wake
    assert _held_by_me() == 0  # another process (an xdist sibling) may hold its own: the limit is not read here
    with hostload.idle_cpus_polling(False) as held:
        assert held is False and _held_by_me() == 0


@pytest.mark.tcpnet_needs("htb")
def test_a_measurement_keeps_idle_cpus_polling_and_records_it(tcpnet):
    """A real transfer and a user's program under observe(): the request is held inside the measurement only, and
    every flow says whether it was (cpus_polled, in its row too)."""
    allowed = _may_request()
    pair = tcpnet.pair(Link(rate="20mbit"))
    with pair.observe():
        inside = _held_by_me()
        pair.server.run(["python3", "-c", "pass"], check=True)
    assert inside == (1 if allowed is True else 0) and _held_by_me() == 0
    flow = pair.transfer(nbytes=200_000)
    assert flow.cpus_polled is allowed and result_row(flow)["cpus_polled"] is allowed, flow
    (stream,) = pair.run(Bulk([Cbr("1mbit", duration=0.3)])).results  # a workload's own results say so too
    assert stream.cpus_polled is allowed and result_row(stream)["cpus_polled"] is allowed, stream
    assert _held_by_me() == 0


@pytest.mark.tcpnet_needs("htb")
def test_a_lab_told_not_to_leaves_idle_cpus_alone():
    with Lab(idle_poll=False) as lab:
        pair = lab.pair(Link(rate="20mbit"))
        with pair.observe():
            assert _held_by_me() == 0
        flow = pair.transfer(nbytes=200_000)
    assert flow.cpus_polled is False, flow


def test_a_steal_line_says_when_idle_cpus_halted():
    """Beside steal, a flow measured on halted idle CPUs says part of it was their wake-ups, and how to avoid it."""
    (halted,) = machine_lines(0.3, None, polled=False)
    assert "not kept polling" in halted and "--tcpnet-idle-poll=off" in halted, halted
    (polled,) = machine_lines(0.3, None, polled=True)
    assert "not kept polling" not in polled, polled


def test_bad_values_are_refused(pytester):
    with pytest.raises(ValueError, match="idle_poll: must be True or False"):
        Lab(idle_poll="yes")
    pytester.makepyfile(test_nothing="def test_nothing():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--tcpnet-idle-poll=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--tcpnet-idle-poll*invalid choice*'maybe'*"])
