"""Leak-proof under kills, and never touching what is not ours (ownership proven by records, not by names).

Each kill test runs a real lab in a child process, kills it at a chosen point, runs the
documented cleanup command and checks that nothing of that child is left: namespaces,
ownership records, processes, host interfaces. Look-alike namespaces (made with `ip netns
add`, with a process inside via `ip netns exec`) must survive every sweep.
"""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import hoststate
import pytest
from children import STACKS_ON_SIGUSR1, checkout_env

from pytest_tcpnet import (
    Lab,
    Link,
    netlink,
    rootless,  # noqa: E402
)
from pytest_tcpnet.errors import LabError
from pytest_tcpnet.netlink import ownership

pytestmark = [
    pytest.mark.tcpnet_needs("privilege"),
    # Root-only: look-alikes are planted with `ip netns add` in the host's /run/netns and the
    # host's sweeper is what is tested; a rootless session has neither.
    pytest.mark.skipif(rootless.inside(), reason="root-only: plants namespaces in the host's /run/netns"),
]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def lookalike():
    """A namespace named like ours but made by someone else, with a process running inside it."""
    # Our naming pattern with this test's own owner tag: a sweeper that trusted names would take
    # it for ours. (A dead-owner tag would be deleted by older pytest-tcpnet copies other people
    # may be running on the same machine, which is exactly the bug these tests prevent.)
    name = f"{netlink.PREFIX}{netlink.owner_tag()}-mine"
    subprocess.run(["ip", "netns", "add", name], check=True)
    sleeper = subprocess.Popen(["ip", "netns", "exec", name, "sleep", "600"])
    try:
        yield name, sleeper
    finally:
        sleeper.kill()
        sleeper.wait()
        subprocess.run(["ip", "netns", "del", name], check=False)


def _child(children, body):
    """Start a Python child (owned by the test) that runs `body` with a Lab; it prints READY at the point to kill it."""
    script = (
        STACKS_ON_SIGUSR1
        + textwrap.dedent("""
        import os, sys, time
        sys.path.insert(0, {root!r})
        from pytest_tcpnet import Lab, Link, Host
        lab = Lab()
    """).format(root=ROOT)
        + textwrap.dedent(body)
    )
    # Many slots: the child must not queue behind this session's other transfers (it takes the highest free one).
    return children.popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=checkout_env(TCPNET_MEASUREMENT_SLOTS=64),
    )


def _await_ready(proc, timeout=60):
    """The child's READY line; a child that says nothing within `timeout` is killed and the test fails."""
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            proc.kill()  # its group is the `children` fixture's
            pytest.fail(f"the child said nothing within {timeout} s: {proc.communicate()[1]}")
    line = proc.stdout.readline()
    assert line.startswith("READY"), (line, proc.stderr.read() if proc.poll() is not None else "")
    return line.split()[1:]


def _ours(pid):
    """Namespaces and records a process with this pid left (our names carry the owner's pid)."""
    tag = f"{netlink.PREFIX}{pid}."
    namespaces = [n for n in netlink.lab_namespaces() if n.startswith(tag)]
    records = [r for r in ownership.recorded_state() if r.startswith(tag)]
    return namespaces, records


def _cleanup():
    out = subprocess.run(
        [sys.executable, "-m", "pytest_tcpnet.cleanup"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def _assert_gone(pid, process_pids=()):
    namespaces, records = _ours(pid)
    assert namespaces == [] and records == []
    deadline = time.monotonic() + 5
    alive = list(process_pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if os.path.exists(f"/proc/{p}") and _state(p) != "Z"]
        time.sleep(0.05)
    assert alive == [], f"processes still running: {alive}"


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _assert_lookalike_untouched(lookalike):
    name, sleeper = lookalike
    assert name in netlink.lab_namespaces()
    assert sleeper.poll() is None, "the look-alike's process was killed"


def test_records_prove_what_we_made_and_vanish_at_teardown():
    with Lab() as lab:
        pair = lab.pair(link=Link(rate="50mbit"))
        records = ownership.namespace_records()
        for node in pair.nodes:
            st = os.stat(netlink.namespace_path(node.namespace))
            assert (records[node.namespace]["inode"], records[node.namespace]["device"]) == (st.st_ino, st.st_dev)
            assert records[node.namespace]["owner_pid"] == os.getpid()
        sleeper = pair.server.popen(["sleep", "60"])
        assert f"{pair.server.namespace}.{sleeper.pid}.proc" in ownership.recorded_state()
        pair.close()
        assert not any(r.startswith(f"{netlink.PREFIX}{os.getpid()}.") for r in ownership.recorded_state())
        assert sleeper.poll() is not None


def test_sweep_never_touches_a_lookalike(lookalike):
    with Lab():  # a Lab sweeps on start
        pass
    assert lookalike[0] not in netlink.sweep_stale_namespaces()
    _assert_lookalike_untouched(lookalike)


def test_state_directory_must_be_private(tmp_path, monkeypatch):
    shared = tmp_path / "state"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)
    monkeypatch.setattr(ownership, "STATE_DIR", str(shared))
    with pytest.raises(LabError, match="mode 0700"):
        ownership.record_namespace("tcpnet-x", 1, 1)
    assert list(shared.iterdir()) == []


def test_a_record_whose_namespace_was_replaced_is_not_trusted(lookalike, monkeypatch, tmp_path):
    """A dead owner's record naming a namespace that now has another inode: the namespace stays."""
    name, _ = lookalike
    state = tmp_path / "state"
    monkeypatch.setattr(ownership, "STATE_DIR", str(state))
    ownership.record_namespace(name, 1, 1)  # written by "us", then the owner died (pid rewritten below)
    record = state / f"{name}.ns"
    record.write_text(record.read_text().replace(f'"owner_pid": {os.getpid()}', '"owner_pid": 999999'))
    assert ownership.sweep() == []
    _assert_lookalike_untouched(lookalike)
    assert list(state.iterdir()) == []  # the stale record itself is dropped


def _sigkill_builds_after(children, lookalike, delay_ms, builds):
    """Run `builds` (a loop of lab builds) in a child, SIGKILL it part-way, clean up: nothing of it is left."""
    before = hoststate.snapshot()["links"]
    proc = _child(children, 'print("READY", os.getpid(), flush=True)\n' + textwrap.dedent(builds))
    (pid,) = _await_ready(proc)
    time.sleep(0.2 + delay_ms / 1000)
    proc.kill()
    proc.wait()
    _cleanup()
    _assert_gone(int(pid))
    assert hoststate.snapshot()["links"] == before
    _assert_lookalike_untouched(lookalike)


@pytest.mark.parametrize("delay_ms", [5, 15, 30])
def test_sigkill_during_builds_leaves_nothing_after_cleanup(children, lookalike, delay_ms):
    """Killed at different points of back-to-back builds (a build is ~20-40 ms here): creation, wiring, shaping."""
    _sigkill_builds_after(
        children,
        lookalike,
        delay_ms,
        """
        while True:
            lab.pair(link=Link(rate="10mbit"), client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 8192 16384"})).close()
    """,
    )


@pytest.mark.parametrize("delay_ms", [10, 40])
def test_sigkill_during_topology_builds_leaves_nothing_after_cleanup(children, lookalike, delay_ms):
    """Dumbbells and stars (dual-stack, u32 classes, port filters) built back to back, killed part-way: each
    of their namespaces carries its owner's record, so the cleanup removes every one (a 4-pair dumbbell is
    10 namespaces, ~25 ms to build here)."""
    _sigkill_builds_after(
        children,
        lookalike,
        delay_ms,
        """
        while True:
            lab.dumbbell(4, bottleneck=Link(rate="10mbit"), access=Link(rate="5mbit", ports=[5201]), family="dual").close()
            lab.star(servers=3, links=Link(rate="10mbit"), family="ipv6").close()
    """,
    )


def test_sigkill_during_a_transfer_leaves_nothing_after_cleanup(children, lookalike):
    proc = _child(
        children,
        """
        import threading
        pair = lab.pair(link=Link(rate="1mbit"))
        def announce():
            while not pair.server.processes.pids() or not pair.client.processes.pids():
                time.sleep(0.01)
            pids = [pid for n in (pair.server, pair.client) for pid in n.processes.pids()]
            print("READY", os.getpid(), *pids, flush=True)
        threading.Thread(target=announce, daemon=True).start()
        pair.transfer(nbytes=50_000_000)
    """,
    )
    pid, *workload = _await_ready(proc)
    assert workload  # the bulk server and client were running
    proc.kill()
    proc.wait()
    _cleanup()
    _assert_gone(int(pid), [int(p) for p in workload])
    _assert_lookalike_untouched(lookalike)


# TCPNET_REPEAT_CTRL_C=50 repeats it inside a full session (issue 18: it hung only beside other tests).
@pytest.mark.parametrize("attempt", range(int(os.environ.get("TCPNET_REPEAT_CTRL_C", "1"))))
def test_ctrl_c_during_a_transfer_leaves_nothing(children, lookalike, attempt, request):
    proc = _child(
        children,
        """
        import threading
        pair = lab.pair(link=Link(rate="1mbit"))
        def announce():
            while not pair.client.processes.pids():
                time.sleep(0.01)
            print("READY", os.getpid(), *[pid for n in (pair.server, pair.client) for pid in n.processes.pids()],
                  flush=True)
        threading.Thread(target=announce, daemon=True).start()
        try:
            pair.transfer(nbytes=50_000_000)
        finally:
            lab.close()
    """,
    )
    pid, *workload = _await_ready(proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)  # the process itself: its pipes may be held by what it started (checked below)
    except subprocess.TimeoutExpired:
        children.communicate(proc, timeout=0.1)  # fails the test with every thread's stack
    exited = time.monotonic() - sent
    _, err = children.communicate(proc, timeout=10)  # EOF on its pipes: nothing it started still holds them
    request.node.user_properties.append(("sigint_to_exit_s", f"{exited:.3f}"))  # in the JUnit XML
    assert "KeyboardInterrupt" in err
    _assert_gone(int(pid), [int(p) for p in workload])  # no cleanup command: teardown did it
    _assert_lookalike_untouched(lookalike)


def test_a_ctrl_c_the_interpreter_dropped_still_interrupts_the_transfer(children, lookalike):
    """CPython drops a KeyboardInterrupt raised inside a weakref callback ("Exception ignored in ..."): CI saw one
    land in importlib's module-lock callback, and a 50 MB transfer at 1 Mbit/s ran on. The lab raises it again."""
    proc = _child(
        children,
        """
        import signal, weakref
        pair = lab.pair(link=Link(rate="1mbit"))

        class Doomed:
            pass

        def callback(ref):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):  # the handler runs between these bytecodes: its KeyboardInterrupt is dropped
                pass

        doomed = Doomed()
        ref = weakref.ref(doomed, callback)
        del doomed
        print("READY", os.getpid(), flush=True)
        started = time.monotonic()
        try:
            pair.transfer(nbytes=50_000_000)
        finally:
            print(f"interrupted after {time.monotonic() - started:.3f} s", file=sys.stderr, flush=True)
            lab.close()
    """,
    )
    (pid,) = _await_ready(proc)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        children.communicate(proc, timeout=0.1)  # fails the test with every thread's stack
    _, err = children.communicate(proc, timeout=10)
    assert "Exception ignored in: <function callback" in err and "KeyboardInterrupt" in err, err
    assert err.rstrip().endswith("KeyboardInterrupt") and "interrupted after" in err, err
    _assert_gone(int(pid))
    _assert_lookalike_untouched(lookalike)


# The lab's teardown once the interrupt left the measurement: 0.16-0.27 s beside two spinners (18 readings, this test
# alone); the whole exit read 0.17-0.57 s in 29 readings of fresh-clone CI runs and 1.60 s once (run 64). A teardown
# that waits out a timeout (a capture's 15 s settle, a 5 s kill) breaks this; a starved CPU does not.
TEARDOWN_AFTER_INTERRUPT_S = 3.0


BUSY_NEIGHBOUR = """
    print("READY", os.getpid(), flush=True)
    pair = lab.pair()
    while True:
        pair.transfer(nbytes=500_000_000)  # unshaped: both cores busy with a sender and a receiver
"""


@pytest.mark.tcpnet_needs("tshark")
@pytest.mark.parametrize("delay_s", [0.0, 0.02, 0.1, 0.3, 0.8, 1.5])
def test_ctrl_c_at_any_stage_beside_a_busy_session_exits_promptly(children, lookalike, delay_s, request):
    """SIGINT while the child builds its lab, starts its zygote, waits for a slot, starts sampling and capture,
    or transfers: each wait gives way and the measurement unwinds within a second (issue 18), and the lab's teardown
    after it needs no timeout. Beside two spinners and another lab's transfers, signal to leaving the measurement:
    0.001-0.49 s, then teardown 0.16-0.27 s (18 readings). Mid-transfer it once took ~1.0 s while the observation let
    both captures settle (0.4 s each) before the interrupt could leave: an interrupted measurement skips that now."""
    neighbour = _child(children, BUSY_NEIGHBOUR)
    _await_ready(neighbour)
    proc = _child(
        children,
        """
        try:
            print("READY", os.getpid(), flush=True)
            lab.pair(link=Link(rate="1mbit")).transfer(nbytes=50_000_000, capture=True)
        except KeyboardInterrupt:
            # CLOCK_MONOTONIC is the machine's: the parent subtracts the moment it sent the signal.
            print(f"LEFT {time.monotonic():.6f}", file=sys.stderr, flush=True)
            raise
        finally:
            lab.close()
    """,
    )
    (pid,) = _await_ready(proc)
    time.sleep(delay_s)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        children.communicate(proc, timeout=0.1)  # fails the test with every thread's stack
    exited = time.monotonic() - sent
    _, err = children.communicate(proc, timeout=10)
    left = re.search(r"^LEFT ([0-9.]+)$", err, re.MULTILINE)
    assert left and "KeyboardInterrupt" in err, err
    left_s = float(left.group(1)) - sent
    request.node.user_properties.append(("sigint_to_left_s", f"{left_s:.3f}"))  # in the JUnit XML
    request.node.user_properties.append(("sigint_to_exit_s", f"{exited:.3f}"))
    # The claim: whichever wait the interrupt met gave way and the measurement unwound within a second. The traceback
    # says which wait it met (run 64, beside a CPU hog: 1.60 s from signal to exit once, against 0.17-0.57 s in 29
    # other readings, the lab's teardown then included).
    assert left_s < 1, f"{left_s:.2f} s from SIGINT to leaving the measurement; the child's stderr ends:\n{err[-4000:]}"
    assert exited - left_s < TEARDOWN_AFTER_INTERRUPT_S, (
        f"the lab's teardown after the interrupt took {exited - left_s:.2f} s; the child's stderr ends:\n{err[-4000:]}"
    )
    _assert_gone(int(pid))
    _assert_lookalike_untouched(lookalike)


XDIST_PROJECT = textwrap.dedent("""
    import os, time
    from pytest_tcpnet import Link

    def test_blocks(tcpnet):
        pair = tcpnet.pair(link=Link(rate="1mbit"))
        sleeper = pair.server.popen(["sleep", "600"])
        with open(os.environ["TCPNET_TEST_MARK"], "w") as f:
            f.write(f"{os.getpid()} {sleeper.pid}")
        time.sleep(600)
""")


def test_sigkill_of_an_xdist_worker_leaves_nothing_after_cleanup(children, tmp_path, lookalike):
    (tmp_path / "test_project.py").write_text(XDIST_PROJECT)
    mark = tmp_path / "mark"
    proc = children.popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "1", "test_project.py"],
        cwd=tmp_path,
        env=checkout_env(TCPNET_TEST_MARK=str(mark)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    children.wait_until(proc, lambda: mark.exists() and mark.read_text(), 120, "its worker built a lab")
    worker, sleeper = (int(x) for x in mark.read_text().split())
    os.kill(worker, signal.SIGKILL)
    out, _ = children.communicate(proc, timeout=120)
    assert "crashed" in out or "worker" in out, out
    _cleanup()
    _assert_gone(worker, [sleeper])
    _assert_lookalike_untouched(lookalike)
