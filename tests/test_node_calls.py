"""Node.call / submit / spawn: the user's own Python code inside a lab namespace (real namespaces, real sockets)."""

import concurrent.futures
import os
import threading
import time

import nodecalls
import pytest

from pytest_tcpnet import LabError

pytestmark = pytest.mark.tcpnet_needs("privilege")


def test_call_runs_inside_the_namespace_and_leaves_this_thread_where_it_was(tcpnet):
    pair = tcpnet.pair()
    host_interfaces = nodecalls.interfaces()
    assert pair.client.call(nodecalls.interfaces) == ["lo", pair.client.interface]
    assert len(pair.router.call(nodecalls.interfaces)) == 3  # lo and one veth to each end
    assert nodecalls.interfaces() == host_interfaces  # the caller's thread never moved
    before = {t.name for t in threading.enumerate()}
    pair.server.call(time.sleep, 0.01)
    deadline = time.monotonic() + 2
    while {t.name for t in threading.enumerate()} - before and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not {t.name for t in threading.enumerate()} - before  # the thread that entered the lab has ended


def test_a_request_and_response_between_two_callables(tcpnet):
    pair = tcpnet.pair()
    served = pair.server.submit(nodecalls.echo_server, pair.server.address, 7000, count=2)
    assert isinstance(served, concurrent.futures.Future)
    assert pair.client.call(nodecalls.ask, pair.server.address, 7000, "hello", timeout=30) == "olleh"
    assert pair.client.call(nodecalls.ask, pair.server.address, 7000, "again") == "niaga"
    assert served.result(timeout=30) == ["hello", "again"]


def test_an_exception_is_re_raised_naming_the_node(tcpnet):
    pair = tcpnet.pair()
    with pytest.raises(ValueError, match="boom") as info:
        pair.client.call(nodecalls.fail, "boom")
    assert any("in <Node client" in note for note in info.value.__notes__)
    with pytest.raises(ValueError, match="boom") as info:
        pair.server.spawn(nodecalls.fail, "boom").result(timeout=30)
    assert any("test_node_calls" not in note and "nodecalls:fail" in note for note in info.value.__notes__)


def test_call_gives_up_after_its_timeout(tcpnet):
    pair = tcpnet.pair()
    started = time.monotonic()
    with pytest.raises(LabError, match=r"sleep did not return within 0\.2 s in <Node client"):
        pair.client.call(time.sleep, 1.0, timeout=0.2)
    assert time.monotonic() - started < 0.9


def test_spawn_forks_from_the_zygote_into_the_namespace_and_returns_the_result(tcpnet):
    from pytest_tcpnet.workload.spawn import zygote_pid

    pair = tcpnet.pair()
    zygote = zygote_pid()
    started = time.monotonic()
    call = pair.server.spawn(nodecalls.identity)
    pid, parent, interfaces = call.result(timeout=30)
    elapsed = time.monotonic() - started
    assert pid == call.pid != os.getpid() and interfaces == ["lo", pair.server.interface]
    assert parent == zygote  # a fork of the preloaded zygote, not a fresh interpreter
    print(f"spawn to result: {elapsed * 1e3:.1f} ms")


def test_spawned_children_stop_with_their_pair(tcpnet):
    pair = tcpnet.pair()
    call = pair.client.spawn(nodecalls.sleep_forever)
    deadline = time.monotonic() + 10
    while not os.path.exists(f"/proc/{call.pid}") and time.monotonic() < deadline:
        time.sleep(0.01)
    assert call.running()
    with pytest.raises(LabError, match="did not return within 0.1 s"):
        call.result(timeout=0.1)
    pair.close()
    assert not call.running()


def test_bad_input_is_refused_before_anything_runs(tcpnet):
    pair = tcpnet.pair()
    with pytest.raises(TypeError, match="fn: expected a callable"):
        pair.client.call("not a function")
    with pytest.raises(ValueError, match="timeout"):
        pair.client.call(nodecalls.interfaces, timeout=0)
    with pytest.raises(ValueError, match="timeout"):
        pair.client.call(nodecalls.interfaces, timeout=float("nan"))
    with pytest.raises(TypeError, match="module level in an importable module"):
        pair.client.spawn(lambda: None)
    with pytest.raises(TypeError, match="arguments of nodecalls:fail cannot be pickled"):
        pair.client.spawn(nodecalls.fail, threading.Lock())
    assert pair.client.processes.pids() == []  # nothing was started by any of them
    with pytest.raises(LabError, match="cannot be sent back"):
        pair.client.spawn(nodecalls.unpicklable_result).result(timeout=30)
    pair.close()
    for method in (pair.client.call, pair.client.submit, pair.client.spawn):
        with pytest.raises(LabError, match="its world is closed"):
            method(nodecalls.interfaces)
