"""Deterministic sessions (--tcpnet-deterministic): a User-Mode Linux guest with time travel and seeded netem.

Fast tests cover choosing the build and refusing what cannot run, with fake builds. The ``tcpnet_vm_boot`` test boots
the real build dev/setup-uml-tt makes (no mocks) again and again, quiet and beside a CPU hog on every core, and
compares what each run measured.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_uml import _fake_build
from test_vm import _env

from pytest_tcpnet import guest
from pytest_tcpnet.vm import backend, uml
from pytest_tcpnet.vm.errors import VMUsageError


def _time_travel_build(root: Path, release: str) -> uml.UmlBuild:
    build = _fake_build(root, release)
    (root / uml.RECORD).write_text(f"suite=source\nrelease={release}\ntime_travel=yes\n")
    return uml.UmlBuild(build.binary, build.release, build.modules, time_travel=True)


@pytest.fixture
def only_these_builds(tmp_path, monkeypatch):
    monkeypatch.setattr(uml, "UNPACKED_ROOT", str(tmp_path / "none"))
    monkeypatch.setattr(uml, "SYSTEM_ROOT", str(tmp_path / "none"))
    packaged = _fake_build(tmp_path / "packaged", "6.12.113")
    monkeypatch.setenv("TCPNET_UML_DIRS", str(tmp_path / "packaged"))
    return tmp_path, packaged


def test_a_time_travel_build_is_never_a_kernel_line_s_default(only_these_builds, monkeypatch):
    tmp_path, packaged = only_these_builds
    travelling = _time_travel_build(tmp_path / "tt", "6.12.117-tcpnet-tt")
    monkeypatch.setenv("TCPNET_UML_DIRS", f"{tmp_path / 'packaged'}:{tmp_path / 'tt'}")
    # Newer, and of the same line: still not what --tcpnet-kernel=6.12 (or all) boots.
    assert uml.installed_builds() == [packaged] and uml.find_build("6.12") == packaged
    assert uml.installed_builds(time_travel=True) == [travelling]
    assert backend.time_travel_target(None).build == travelling
    assert backend.time_travel_target(["6.12"], "uml").build == travelling
    assert "time-travel=inf-cpu" in uml.command(travelling, "2G", "/init", "/d", "id")
    assert not any("time-travel" in word for word in uml.command(packaged, "2G", "/init", "/d", "id"))


def test_a_deterministic_session_refuses_what_it_cannot_run_before_anything_boots(only_these_builds, monkeypatch):
    tmp_path, _ = only_these_builds
    with pytest.raises(VMUsageError, match=r"no User-Mode Linux build with time travel is installed.*dev/setup-uml-tt"):
        backend.time_travel_target(None)
    _time_travel_build(tmp_path / "tt", "6.12.117-tcpnet-tt")
    monkeypatch.setenv("TCPNET_UML_DIRS", str(tmp_path / "tt"))
    with pytest.raises(VMUsageError, match="with time travel of kernel line 6.1 is installed"):
        backend.time_travel_target(["6.1"])
    with pytest.raises(VMUsageError, match="not --tcpnet-vm-backend=tcg"):
        backend.time_travel_target(None, "tcg")
    with pytest.raises(VMUsageError, match="at most one --tcpnet-kernel, a kernel line"):
        backend.time_travel_target(["6.12", "6.1"])
    with pytest.raises(VMUsageError, match="at most one --tcpnet-kernel, a kernel line"):
        backend.time_travel_target(["/boot/vmlinuz-6.12.113"])


def test_a_time_travel_guest_names_itself_in_every_result_s_conditions(monkeypatch):
    monkeypatch.setenv(guest.IN_VM_ENV, "1")
    monkeypatch.setenv(guest.BACKEND_ENV, "uml")
    assert guest.conditions() == "User-Mode Linux guest" and not guest.time_travel()
    monkeypatch.setenv(guest.TIME_TRAVEL_ENV, "1")
    assert guest.conditions() == "User-Mode Linux guest with time travel" and guest.time_travel()


@pytest.fixture(scope="module")
def time_travel_build():
    """The build dev/setup-uml-tt makes; skip where there is none (fail where CI requires it)."""
    builds = uml.installed_builds(time_travel=True)
    if not builds:
        why = "no User-Mode Linux build with time travel installed (bash dev/setup-uml-tt)"
        if os.environ.get("TCPNET_VM_TEST_REQUIRE_TIME_TRAVEL") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return builds[-1]


# Two claims the issue names: a lossy transfer and a three-flow dumbbell, each writing what it measured.
DETERMINISTIC_TESTS = """
import json, os
from pytest_tcpnet import Flow, Link


def _figures(result):
    return {
        "nbytes": result.nbytes,
        "duration_s": result.duration_s,
        "retransmits": result.retransmits,
        "emulator_drops": result.emulator_drops,
        "cwnd": result.series("snd_cwnd"),
        "rtt": result.series("rtt"),
        "bytes_acked": result.series("bytes_acked"),
        "host_steal_cpus": result.host_steal_cpus,
    }


def _write(name, value):
    with open(os.path.join(os.environ["TCPNET_DETTEST_OUT"], name + ".json"), "w") as f:
        json.dump(value, f)


def test_a_lossy_transfer(tcpnet):
    pair = tcpnet.pair(link=Link(rate="20mbit", rtt="40ms", to_client={"loss": "1%"}))
    _write("transfer", _figures(pair.transfer(3_000_000, cc="cubic")))


def test_a_three_flow_dumbbell(tcpnet):
    bell = tcpnet.dumbbell(3, bottleneck=Link(rate="30mbit", rtt="20ms", limit=60))
    result = bell.concurrent([Flow(duration=2, cc="cubic") for _ in range(3)])
    _write("dumbbell", [_figures(flow) for flow in result.flows])

def test_the_guest_kernel_s_random_draws():
    import socket
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as c:
        _write("randomness", {"urandom": os.urandom(16).hex(), "ephemeral_port": c.getsockname()[1]})
"""


def _session(proj: Path, *extra: str, hog: bool = False) -> dict:
    """One deterministic session of the project: {test name: what it measured}. Each starts from the same project
    directory: the guest reads it (collection, hostfs), and what it finds is part of its input."""
    out = proj / "out"  # in the project: the guest writes there
    out.mkdir()
    hogs = []
    if hog:
        spin = "while True:\n    pass"
        hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(os.cpu_count() or 1)]
    try:
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--tcpnet-deterministic", "-q", *extra],
            cwd=proj,
            env=_env(TCPNET_DETTEST_OUT=str(out)),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"
        return {name: json.loads((out / f"{name}.json").read_text()) for name in ("transfer", "dumbbell", "randomness")}
    finally:
        for process in hogs:
            process.kill()
            process.wait()
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(proj / "tcpnet-artifacts", ignore_errors=True)


def _differences(a: dict, b: dict) -> list:
    """Which figures of the flows of two sessions are not identical, by test and flow."""
    found = []
    for test in ("transfer", "dumbbell"):
        flows_a, flows_b = ([x] if isinstance(x, dict) else x for x in (a[test], b[test]))
        for i, (fa, fb) in enumerate(zip(flows_a, flows_b)):
            found += [f"{test}[{i}].{k}: {fa[k]!r:.60} vs {fb[k]!r:.60}" for k in fa if fa[k] != fb[k]]
    return found


@pytest.mark.tcpnet_vm_boot
def test_the_same_seed_measures_the_same_flows_every_time_quiet_or_beside_a_cpu_hog(tmp_path, time_travel_build):
    """A lossy transfer (20 Mbit/s, 40 ms, 1% loss, 3 MB) and a three-flow dumbbell, each of ten sessions booted
    afresh, three beside a spinning process on every CPU, each finding more files in the project than the last: the
    same bytes, retransmissions and durations, and the same TCP_INFO series sample by sample, to the nanosecond,
    while the guest kernel's random generator draws differently each time (it is not pinned: shown not to matter);
    another seed, another (still lossy) run."""
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pytest.ini").write_text("[pytest]\n")
    (proj / "test_deterministic_claims.py").write_text(DETERMINISTIC_TESTS)
    first = _session(proj)
    assert first["transfer"]["retransmits"] > 0 and first["transfer"]["nbytes"] == 3_000_000, first["transfer"]
    # A time-travel guest's clock stands still while its host is stalled: steal is not read, so nothing is retaken
    # or run again (docs/reports.md).
    assert first["transfer"]["host_steal_cpus"] is None, first["transfer"]["host_steal_cpus"]
    assert len(first["dumbbell"]) == 3 and all(len(flow["cwnd"]) > 100 for flow in first["dumbbell"])
    for run in range(1, 10):
        # What the guest finds in the project moves its clock before the flows (failed lookups cost it 1 us each);
        # measurements start on a grid of guest time, so it must not reach them.
        (proj / f"leftover-{run}").mkdir()
        (proj / f"leftover-{run}" / "results.json").write_text("{}")
        again = _session(proj, hog=run in (2, 5, 8))
        # The guest kernel's random generator is not pinned (UML feeds it the host's getrandom(), wall clock and
        # interrupts): shown not to matter, its draws differ while every figure of the flows is the same.
        assert again["randomness"]["urandom"] != first["randomness"]["urandom"]
        assert not _differences(first, again), f"session {run}:\n" + "\n".join(_differences(first, again))
    other = _session(proj, "--tcpnet-seed=1")
    assert other["transfer"]["retransmits"] > 0 and _differences(first, other)
