"""The User-Mode Linux backend (pytest_tcpnet.vm.uml, backend, the mailbox host calls).

Fast tests cover choosing a backend and the guest's script from fake builds. Tests marked ``tcpnet_vm_boot``
boot the real UML builds dev/setup-uml installs (no mocks): a session with real netem, the host's analysis
through the mailbox, a root the guest cannot write even as its root, and no process, directory or mount left
behind by Ctrl-C or SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from xml.etree import ElementTree

import pytest
from test_vm import REPO, _env, _popen, _project, _pytest, _wait_for, _workdirs_for

from pytest_tcpnet.report import read_rows
from pytest_tcpnet.vm import backend, hostcall, kernel, runner, uml
from pytest_tcpnet.vm.errors import VMUsageError


def _fake_build(root: Path, release: str, modules=("sch_netem",)) -> uml.UmlBuild:
    """A directory laid out like an unpacked user-mode-linux package (the binary is a stand-in)."""
    binary = root / uml.BINARY
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nexit 1\n")
    binary.chmod(0o755)
    mods = root / uml.MODULES / release
    mods.mkdir(parents=True)
    (mods / "modules.dep").write_text("".join(f"kernel/net/sched/{m}.ko:\n" for m in modules))
    return uml.UmlBuild(str(binary), release, str(mods))


def test_kernel_lines_of_releases_and_specs():
    assert [uml.kernel_line(r) for r in ("6.1.0-56-amd64", "6.1.176", "6.12.117+deb12-amd64", "6.12.113")] == [
        "6.1",
        "6.1",
        "6.12",
        "6.12",
    ]
    assert [uml.is_line(s) for s in ("6.1", "6.12", "6.1.176", "6.1.0-56-amd64", "", "all", "/boot/x")] == [
        True,
        True,
        False,
        False,
        False,
        False,
        False,
    ]
    with pytest.raises(VMUsageError, match="cannot tell the kernel line"):
        uml.kernel_line("linux")


def test_installed_builds_are_found_by_layout(tmp_path, monkeypatch):
    a, b = _fake_build(tmp_path / "a", "6.1.176"), _fake_build(tmp_path / "b", "6.12.113")
    (tmp_path / "broken" / "usr" / "bin").mkdir(parents=True)  # no binary, no modules: not a build
    monkeypatch.setattr(uml, "UNPACKED_ROOT", str(tmp_path / "none"))
    monkeypatch.setattr(uml, "SYSTEM_ROOT", str(tmp_path / "none"))
    monkeypatch.setenv("TCPNET_UML_DIRS", f"{tmp_path / 'b'}:{tmp_path / 'broken'}:{tmp_path / 'a'}")
    assert uml.installed_builds() == [a, b]  # oldest first
    assert uml.find_build("6.12") == b and uml.find_build("5.10") is None
    with pytest.raises(
        VMUsageError,
        match=r"no User-Mode Linux build of kernel line 5.10 \(installed: 6.1 \(6.1.176"
        r".*dev/setup-uml",
    ):
        uml.require_build("5.10")


def test_auto_takes_kvm_then_uml_then_tcg_and_says_why(tmp_path):
    build = _fake_build(tmp_path / "u", "6.1.176")
    image = kernel.Kernel("/boot/vmlinuz-6.1.0-56-amd64", "6.1.0-56-amd64", "/lib/modules/6.1.0-56-amd64")
    both, qemu_only, uml_only = (
        backend.Target("6.1", "6.1", image, build),
        backend.Target("6.1", "6.1", image),
        backend.Target("6.1", "6.1", None, build),
    )

    def kvm_works():
        return "kvm", "KVM probe boot reached its command in 2.1 s"

    def no_kvm():
        return "tcg", "KVM probe boot failed (qemu exited with 250: kvm_buf_set_msrs)"

    assert backend.choose("auto", both, kvm_works).backend == "kvm"
    chosen = backend.choose("auto", both, no_kvm)
    assert chosen.backend == "uml" and chosen.release == "6.1.176"
    assert "kvm_buf_set_msrs" in chosen.why and build.binary in chosen.why
    chosen = backend.choose("auto", qemu_only, no_kvm)
    assert chosen.backend == "tcg" and chosen.release == "6.1.0-56-amd64" and "dev/setup-uml" in chosen.why
    assert backend.choose("auto", uml_only, kvm_works).backend == "uml"  # no image: nothing to probe
    assert backend.choose("tcg", both).why == "forced by --tcpnet-vm-backend=tcg"


def test_a_backend_that_cannot_boot_the_kernel_is_refused_naming_the_fix(tmp_path, monkeypatch):
    image = kernel.Kernel("/boot/vmlinuz-6.1.0-56-amd64", "6.1.0-56-amd64", "/lib/modules/6.1.0-56-amd64")
    monkeypatch.setattr(uml, "installed_builds", lambda: [])
    with pytest.raises(VMUsageError, match="no User-Mode Linux build of kernel line 6.1.*bash dev/setup-uml"):
        backend.choose("uml", backend.Target("6.1", "6.1", image))
    with pytest.raises(VMUsageError, match="--tcpnet-vm-backend=kvm: no qemu image of kernel line 6.12.*uml or auto"):
        backend.choose("kvm", backend.Target("6.12", "6.12", None, _fake_build(tmp_path / "u", "6.12.113")))
    with pytest.raises(VMUsageError, match="must be one of auto, kvm, uml, tcg, not 'qemu'"):
        backend.choose("qemu", backend.Target("6.1", "6.1", image))


class _Config:
    def __init__(self, tmp_path, **opts):
        import argparse

        self.opts = {
            "tcpnet_vm_cpus": 2,
            "tcpnet_vm_memory": "1G",
            "tcpnet_vm_boot_timeout": 60.0,
            "tcpnet_vm_lock_timeout": 5.0,
            **opts,
        }
        self.invocation_params = argparse.Namespace(dir=tmp_path, args=())
        self.args = []
        self.pluginmanager = argparse.Namespace(hasplugin=lambda name: False)

    def getoption(self, name, default=None):
        return self.opts.get(name, default)


def test_a_uml_build_without_netem_is_refused_before_anything_boots(tmp_path, monkeypatch):
    build = _fake_build(tmp_path / "u", "6.1.176", modules=("sch_htb",))
    monkeypatch.setattr(uml, "installed_builds", lambda: [build])
    monkeypatch.setattr(runner, "launch", lambda *a, **k: pytest.fail("booted"))
    config = _Config(tmp_path, tcpnet_vm_kernel=["6.1"], tcpnet_vm_backend="uml")
    with pytest.raises(VMUsageError, match=r"6.1.176\) has no sch_netem in .*reinstall it \(bash dev/setup-uml"):
        runner.plan_from_config(config, backend.Target("6.1", "6.1", None, build))


def test_the_guest_init_mounts_shares_and_modules_and_powers_off(tmp_path):
    build = _fake_build(tmp_path / "u", "6.12.113")
    text = uml.guest_init("echo body; exit 3\n", build, ["/work/p", "/tmp/tcpnet-vm-x"], ["/tmp/venv"], "/bin/busybox")
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert f"mount --bind {tmp_path / 'u' / uml.MODULES} /lib/modules" in text
    assert "for path in /work/p /tmp/tcpnet-vm-x; do" in text and "for path in /tmp/venv; do" in text
    assert text.index("for path in /tmp/venv") < text.index("for path in /work/p")  # code, then shares over it
    assert text.index("mount -t tmpfs -o mode=1777 tmpfs") < text.index("for path in /tmp/venv")
    # The body runs in a subshell (its exit does not end PID 1), then the guest powers off.
    assert lines[-3:] == ["echo body; exit 3", ")", "off"] and "exec /bin/busybox poweroff -f" in text
    cmd = uml.command(build, "1G", "/tmp/w/init.sh", "/tmp/w/uml", "tcpnet-1")
    assert cmd[0] == build.binary and "ro" in cmd and "rootfstype=hostfs" in cmd and "rootflags=/" in cmd
    assert "init=/tmp/w/init.sh" in cmd and "uml_dir=/tmp/w/uml" in cmd and "mem=1G" in cmd
    assert not [w for w in cmd if w.startswith(("eth", "vec", "ubd"))]  # no network device, no disk


def test_mailbox_host_calls_round_trip(tmp_path, monkeypatch):
    """The guest side (call) and the host side (MailboxServer) through a directory, as a UML guest uses them."""
    server = hostcall.MailboxServer(str(tmp_path / "box")).start()
    try:
        monkeypatch.setenv(hostcall.ENV, "1")
        monkeypatch.setenv(hostcall.MAILBOX_ENV, server.path)
        monkeypatch.setattr(hostcall, "_port", "")  # no virtio port here
        assert hostcall.available()
        replies = []
        threads = [threading.Thread(target=lambda: replies.append(hostcall.call("cpu", timeout=10))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(replies) == 4 and all(r[0]["ok"] and "busy_s" in r[0] for r in replies), replies
        reply, _ = hostcall.call("no_such_op", timeout=10)
        assert not reply["ok"] and "unknown host call 'no_such_op'" in reply["error"]
        assert server.cpu_calls == 4 and server.calls == 1
        assert os.listdir(server.path) == []  # every request and reply taken
        # A guest side by side with another: its own CPU time is its own process tree's (here a child that spun).
        spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint(flush=True)\n"
        spinner = subprocess.Popen([sys.executable, "-c", spin + "time.sleep(30)"], stdout=subprocess.PIPE)
        try:
            assert spinner.stdout is not None and spinner.stdout.readline() == b"\n"  # it has spun
            server.root = spinner.pid
            reply, _ = hostcall.call("cpu", timeout=10)
            assert reply["ok"] and 0.25 <= reply["own_s"] < 1.0, reply
        finally:
            spinner.kill()
            spinner.wait()
    finally:
        server.close()


def test_a_mailbox_nobody_serves_times_out_and_leaves_nothing(tmp_path, monkeypatch):
    box = tmp_path / "box"
    box.mkdir()
    monkeypatch.setenv(hostcall.ENV, "1")
    monkeypatch.setenv(hostcall.MAILBOX_ENV, str(box))
    monkeypatch.setattr(hostcall, "_port", "")
    with pytest.raises(hostcall.Unavailable, match="did not answer in time"):
        hostcall.call("cpu", timeout=0.2)
    assert os.listdir(box) == []


# ---------------------------------------------------------------- real User-Mode Linux guests


@pytest.fixture(scope="module")
def uml_build():
    """The UML build the boot tests use (TCPNET_VM_TEST_UML_LINE, default the oldest); skip where none is installed."""
    builds = uml.installed_builds()
    line = os.environ.get("TCPNET_VM_TEST_UML_LINE")
    build = uml.find_build(line, builds) if line else (builds[0] if builds else None)
    if build is None:
        pytest.skip(f"no User-Mode Linux build{' of ' + line if line else ''} installed ({uml.SETUP_HINT})")
    return build


def _umls_in(directory: Path) -> list:
    """Pids of linux.uml processes whose cwd is ``directory`` (the runner starts the guest there)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().startswith("linux.uml") and os.readlink(entry / "cwd") == str(directory):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _outside_dir() -> Path:
    """A directory of the host's that no session shares, nor under /tmp, /run or /var/tmp (a guest mounts its own
    there), that any user may cross: the guest sees it read-only. The checkout's parent may be /tmp (CI's clone)."""
    path = Path(tempfile.mkdtemp(prefix="tcpnet-umltest-", dir="/var/lib"))
    path.chmod(0o755)
    return path


UML_GUEST_TESTS = """
import json, os, subprocess, sys

def test_forwarded(tmp_path):
    outside = os.environ["TCPNET_UMLTEST_OUTSIDE"]
    refused = {}
    for path in (os.path.join(outside, "written-by-the-guest"), "/etc/tcpnet-written-by-the-guest"):
        try:
            with open(path, "w") as f:
                f.write("x")
            refused[path] = "written"
        except OSError as exc:
            refused[path] = exc.strerror
    # Root of the guest remounts its root read-write: the host's side still refuses the write.
    remount = subprocess.run(["mount", "-o", "remount,rw", "/"], capture_output=True, text=True)
    try:
        with open(os.path.join(outside, "after-remount"), "w") as f:
            f.write("x")
        after = "written"
    except OSError as exc:
        after = exc.strerror
    with open("guest.json", "w") as f:  # the cwd is shared read-write with the host
        json.dump({"argv": sys.argv[1:], "release": os.uname().release, "machine": os.uname().machine,
                   "backend": os.environ.get("TCPNET_VM_ACCEL"), "token": os.environ.get("TCPNET_VMTEST_TOKEN"),
                   "ifaces": sorted(os.listdir("/sys/class/net")), "refused": refused,
                   "remount": remount.returncode, "after_remount": after, "malloc": os.environ.get("PYTHONMALLOC"),
                   "tmp_writable": os.access(tmp_path, os.W_OK)}, f)

def test_netem_is_real():
    from pyroute2 import IPRoute, netns
    name = "tcpnet-umltest"
    netns.create(name)
    try:
        with IPRoute(netns=name) as ipr:
            ipr.link("add", ifname="vmt0", kind="veth", peer="vmt1")
            idx = ipr.link_lookup(ifname="vmt0")[0]
            ipr.tc("add", "netem", idx, delay=20000, loss=1)
            kinds = [q.get_attr("TCA_KIND") for q in ipr.get_qdiscs(idx)]
        assert "netem" in kinds
    finally:
        netns.remove(name)

def test_host_does_the_analysis(tmp_path):
    from pytest_tcpnet import Capture, Host, Lab, vm
    from pytest_tcpnet.analysis import plots
    from pytest_tcpnet.capture import decode
    assert vm.use_host_for_analysis()  # what plugin.py does at configure time: through the mailbox
    with Lab() as lab:
        pair = lab.pair(client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 4096 4096"}))
        with Capture(pair.server, directory=tmp_path) as cap:
            result = pair.transfer(nbytes=100_000)
    assert result.host_contention_cpus is not None  # the host's load while it ran, asked of the runner
    assert "(User-Mode Linux guest)" in result.describe()
    on_host = decode.decode_pcap(cap.result.pcap)
    decode.run_elsewhere(None)
    assert on_host == decode.decode_pcap(cap.result.pcap) and len(on_host) > 50
    paths = plots.plot_result(cap.result, tmp_path)
    assert len(paths) == 3 and all(p.read_bytes().startswith(b"\\x89PNG") for p in paths)
    assert "matplotlib" not in sys.modules  # drawn on the host

def test_fails():
    assert 1 + 1 == 3, "deliberate failure"
"""


@pytest.mark.tcpnet_vm_boot
def test_session_runs_under_user_mode_linux(tmp_path, uml_build, request):
    """One boot: arguments and env forwarded, the build's kernel, real netem, host calls through the mailbox,
    the host's files read-only even to the guest's root, exit code, junitxml, nothing left behind."""
    proj = _project(tmp_path, UML_GUEST_TESTS)
    outside = _outside_dir()
    request.addfinalizer(lambda: shutil.rmtree(outside, ignore_errors=True))
    junit = tmp_path / "reports" / "junit.xml"  # outside the cwd: needs its own share
    out = _pytest(
        proj,
        ["--tcpnet-vm", "--tcpnet-vm-backend=uml", f"--tcpnet-kernel={uml_build.line}", f"--junitxml={junit}", "-v"],
        timeout=600,
        env=_env(TCPNET_VMTEST_TOKEN="tok en'1", TCPNET_UMLTEST_OUTSIDE=str(outside)),
    )
    log = f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
    assert out.returncode == 1, log  # one deliberate failure, propagated from the guest
    assert "backend=uml (forced by --tcpnet-vm-backend=uml)" in out.stderr, log
    assert f"booting {uml_build.release} under User-Mode Linux ({uml_build.binary})" in out.stderr, log
    assert "(private read-only root); running pytest in it" in out.stderr, log
    for name in ("test_forwarded", "test_netem_is_real", "test_host_does_the_analysis"):
        assert f"{name} PASSED" in out.stdout, log
    assert "test_fails FAILED" in out.stdout and "deliberate failure" in out.stdout, log
    assert "the host decoded pcaps and drew plots for the guest: 4 host calls" in out.stderr, log
    assert "System halted" not in out.stderr and "\r\n" not in out.stdout, log  # raw consoles, power-off filtered
    guest = json.loads((proj / "guest.json").read_text())
    assert guest["release"] == uml_build.release and guest["backend"] == "uml" and guest["token"] == "tok en'1"
    assert guest["ifaces"] == ["lo"], guest  # no network device
    assert set(guest["refused"].values()) == {"Read-only file system"}, guest
    assert guest["after_remount"] == "Read-only file system", guest
    assert guest["tmp_writable"], guest
    assert guest["malloc"] == os.environ.get("PYTHONMALLOC", "malloc"), guest  # first page touches are costly in UML
    assert not list(outside.iterdir()) and not os.path.exists("/etc/tcpnet-written-by-the-guest")
    cases = {c.get("name") for c in ElementTree.parse(junit).getroot().iter("testcase")}
    assert cases == {"test_forwarded", "test_netem_is_real", "test_host_does_the_analysis", "test_fails"}
    assert not _umls_in(proj) and not _workdirs_for(proj)


@pytest.mark.tcpnet_vm_boot
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "sigkill"])
def test_killing_the_host_session_stops_every_uml_process(tmp_path, uml_build, sig):
    """UML forks several host processes: none outlives the session, nor its directory, nor its mounts."""
    proj = _project(tmp_path, "def test_slow():\n    import time; time.sleep(600)\n")
    proc = _popen(proj, ["--tcpnet-vm", "--tcpnet-vm-backend=uml", f"--tcpnet-kernel={uml_build.line}"])
    try:
        assert _wait_for(lambda: len(_umls_in(proj)) >= 3, 60), "UML never started its processes"
        assert _wait_for(lambda: any(os.path.exists(d / "uml") for d in _workdirs_for(proj)), 30)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if sig != signal.SIGKILL:
        assert proc.returncode == 2 and "interrupted; VM stopped" in err, err
        assert not _umls_in(proj)
    else:  # the watchdog notices its launcher is gone: SIGTERM, then SIGKILL 3 s later
        assert _wait_for(lambda: not _umls_in(proj), 20), "orphaned UML processes still running"
    assert _wait_for(lambda: not _workdirs_for(proj), 10), _workdirs_for(proj)
    with open("/proc/self/mountinfo") as f:
        assert "tcpnet-vm-" not in f.read()  # the guest's private mounts never reached the host's namespace


@pytest.mark.tcpnet_vm_boot
@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="runs a session as nobody: needs root")
def test_an_unprivileged_user_s_guest_cannot_write_the_host_either(tmp_path, uml_build):
    """As nobody (dev/test-rootless): the guest's read-only view comes from a user namespace of its own, so a
    directory nobody may write on the host is still read-only to the guest's root."""
    outside, project = _outside_dir(), _outside_dir()
    try:
        for d in (outside, project):
            os.chmod(d, 0o755)
        shutil.chown(outside, "nobody")
        (project / "test_ro.py").write_text(
            "import os\n\ndef test_outside_is_read_only():\n"
            "    try:\n        open(os.path.join(os.environ['TCPNET_UMLTEST_OUTSIDE'], 'x'), 'w')\n"
            "    except OSError as exc:\n        assert exc.strerror == 'Read-only file system', exc\n"
            "    else:\n        raise AssertionError('the guest wrote to the host')\n"
        )
        out = subprocess.run(
            [
                "bash",
                str(REPO / "dev" / "test-rootless"),
                "--tcpnet-vm",
                "--tcpnet-vm-backend=uml",
                f"--tcpnet-kernel={uml_build.line}",
                "-p",
                "no:cacheprovider",
                str(project / "test_ro.py"),
            ],
            cwd=REPO,
            env=_env(TCPNET_UMLTEST_OUTSIDE=str(outside)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        log = f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
        assert out.returncode == 0 and "1 passed" in out.stdout, log
        assert "(private read-only root)" in out.stderr, log
        assert not list(outside.iterdir())
    finally:
        shutil.rmtree(outside, ignore_errors=True)
        shutil.rmtree(project, ignore_errors=True)


@pytest.mark.tcpnet_vm_boot
def test_several_uml_kernels_in_one_run_end_with_one_table(tmp_path):
    """--tcpnet-kernel twice under UML: each line's build boots in turn, one table of every flow per kernel."""
    builds = uml.installed_builds()
    if len({b.line for b in builds}) < 2:
        pytest.skip(f"needs UML builds of two kernel lines ({uml.SETUP_HINT})")
    first, last = builds[0], builds[-1]
    proj = _project(
        tmp_path,
        "from pytest_tcpnet import Link\n\ndef test_flow(tcpnet):\n"
        "    assert tcpnet.pair(link=Link(rate='20mbit', rtt='10ms')).transfer(nbytes=500_000)"
        ".nbytes == 500_000\n",
    )
    # The real plugin (its tcpnet fixture and results file), not the shim.
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--tcpnet-vm",
            "--tcpnet-vm-backend=uml",
            f"--tcpnet-kernel={first.line}",
            f"--tcpnet-kernel={last.line}",
            "--tcpnet-results=flows.jsonl",
            "test_guest.py",
        ],
        cwd=proj,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
    assert out.returncode == 0, log
    assert f"kernel {first.line} (1 of 2)" in out.stdout and f"kernel {last.line} (2 of 2)" in out.stdout, log
    assert "2 flow(s) under 2 kernels" in out.stdout, log
    # The guest's session header and table say where it ran and why that backend.
    assert f"tcpnet: kernel {first.release} in a User-Mode Linux guest" in out.stdout, log
    assert "tcpnet: backend chosen: forced by --tcpnet-vm-backend=uml" in out.stdout, log
    assert "tcpnet: 1 measured flow(s) in a User-Mode Linux guest" in out.stdout, log
    rows = read_rows([proj / "flows.jsonl"])
    assert [(r["kernel"], r["backend"]) for r in rows] == [(first.release, "uml"), (last.release, "uml")]


@pytest.fixture
def two_lines():
    """The oldest and the newest installed UML build, of two kernel lines; skip where there are not two."""
    builds = uml.installed_builds()
    if len({b.line for b in builds}) < 2:
        pytest.skip(f"needs UML builds of two kernel lines ({uml.SETUP_HINT})")
    return builds[0], builds[-1]


# Each guest's test says it is there (a file in the shared project directory) and waits for the other guest's:
# it passes only if both guests run at once.
SIDE_BY_SIDE_TEST = """import os, time
from pytest_tcpnet import Link

def test_both_guests_at_once(tcpnet):
    me = os.uname().release
    open(f"here-{me}", "w").close()
    deadline = time.monotonic() + 120
    while not [f for f in os.listdir(".") if f.startswith("here-") and f != f"here-{me}"]:
        assert time.monotonic() < deadline, "the other kernel's guest never ran beside this one"
        time.sleep(0.1)
    assert tcpnet.pair(link=Link(rate="20mbit", rtt="10ms")).transfer(nbytes=500_000).nbytes == 500_000
"""


@pytest.mark.tcpnet_vm_boot
def test_two_kernels_run_side_by_side_and_read_one_after_the_other(tmp_path, two_lines):
    """--tcpnet-vm-jobs=2: both guests at once (each one's test waits for the other's), the terminal shows the
    first kernel's whole output before the second's heading, and one table holds both kernels' flows."""
    first, last = two_lines
    proj = _project(tmp_path, SIDE_BY_SIDE_TEST)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--tcpnet-vm",
            "--tcpnet-vm-backend=uml",
            "--tcpnet-vm-jobs=2",
            f"--tcpnet-kernel={first.line}",
            f"--tcpnet-kernel={last.line}",
            "--tcpnet-results=flows.jsonl",
            "--tcpnet-keep=all",
            "test_guest.py",
        ],
        cwd=proj,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = f"--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
    assert out.returncode == 0, log
    text = out.stdout
    heading_1, heading_2 = f"kernel {first.line} (1 of 2)", f"kernel {last.line} (2 of 2)"
    header_1 = f"tcpnet: kernel {first.release} in a User-Mode Linux guest"
    header_2 = f"tcpnet: kernel {last.release} in a User-Mode Linux guest"
    # In order, not interleaved: heading 1, guest 1's session, heading 2, guest 2's session, the merged table.
    order = [text.find(s) for s in (heading_1, header_1, heading_2, header_2, "2 flow(s) under 2 kernels")]
    assert -1 not in order and order == sorted(order), (order, log)
    assert text.count("1 passed") == 2, log
    rows = read_rows([proj / "flows.jsonl"])
    assert sorted((r["kernel"], r["backend"]) for r in rows) == sorted([(first.release, "uml"), (last.release, "uml")])
    # Each kernel's test directories apart: two guests writing one directory would remove each other's files.
    kept = sorted(p.relative_to(proj / "tcpnet-artifacts").parts[0] for p in (proj / "tcpnet-artifacts").glob("*/*"))
    assert kept == [f"kernel-{first.line}", f"kernel-{last.line}"], kept
    assert not _umls_in(proj) and not _workdirs_for(proj)


@pytest.mark.tcpnet_vm_boot
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "sigkill"])
def test_killing_the_host_session_stops_guests_side_by_side(tmp_path, two_lines, sig):
    """Two guests at once (--tcpnet-vm-jobs=2): a signal to the session stops both, and leaves nothing behind."""
    first, last = two_lines
    proj = _project(tmp_path, "def test_slow():\n    import time; time.sleep(600)\n")
    args = ["--tcpnet-vm", "--tcpnet-vm-backend=uml", "--tcpnet-vm-jobs=2"]
    proc = _popen(proj, [*args, f"--tcpnet-kernel={first.line}", f"--tcpnet-kernel={last.line}"])
    try:
        booted = lambda: sum(os.path.exists(d / "uml") for d in _workdirs_for(proj)) == 2  # noqa: E731
        assert _wait_for(booted, 60), "the two guests never both started"
        assert _wait_for(lambda: len(_umls_in(proj)) >= 6, 60), "UML never started both guests' processes"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    if sig != signal.SIGKILL:
        assert proc.returncode == 2 and "stopping 2 guest(s)" in err, err
        assert err.count("interrupted; VM stopped") == 2, (out, err)
        # UML's user processes die with their kernel process (SIGKILL from the kernel); each watchdog waits for them.
        assert not _umls_in(proj), [Path(f"/proc/{p}/stat").read_text() for p in _umls_in(proj)]
    else:
        assert _wait_for(lambda: not _umls_in(proj), 20), "orphaned UML processes still running"
    assert _wait_for(lambda: not _workdirs_for(proj), 10), _workdirs_for(proj)
    with open("/proc/self/mountinfo") as f:
        assert "tcpnet-vm-" not in f.read()


def test_bad_backend_input_is_refused_before_anything_boots(tmp_path):
    proj = _project(tmp_path, "def test_never_runs():\n    pass\n")
    out = _pytest(
        proj,
        ["--tcpnet-vm", "--tcpnet-vm-backend=uml", "--tcpnet-kernel=5.4"],
        timeout=60,
        env=_env(TCPNET_UML_DIRS=""),
    )
    assert out.returncode == 4 and "no kernel of line 5.4 is installed" in out.stderr, out.stderr
    assert "dev/setup-uml" in out.stderr and "booting" not in out.stderr
    out = _pytest(proj, ["--tcpnet-vm", "--tcpnet-vm-backend=qemu"], timeout=60)
    assert out.returncode == 4 and "invalid choice: 'qemu'" in out.stderr, out.stderr
    out = _pytest(proj, ["--tcpnet-vm", "--tcpnet-vm-backend=uml", "--tcpnet-vm-jobs=0"], timeout=60)
    assert out.returncode == 4 and "--tcpnet-vm-jobs must be 1 or more, not 0" in out.stderr, out.stderr
    assert "booting" not in out.stderr
    assert not _umls_in(proj) and not _workdirs_for(proj)


def test_doctor_names_each_backend_and_the_fixes(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pytest_tcpnet", "doctor"],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(XDG_CACHE_HOME=str(tmp_path / "cache")),
    )
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "privilege" in text and "tshark" in text and "kernels for --tcpnet-vm" in text and "KVM" in text
    for build in uml.installed_builds():
        assert f"kernel line {build.line}: User-Mode Linux {build.release}" in text
        assert "boots (" in text.split(f"User-Mode Linux {build.release}")[1].splitlines()[0], text
    if not uml.installed_builds():
        assert "dev/setup-uml" in text
    for build in uml.installed_builds(time_travel=True):
        line = text.split(f"--tcpnet-deterministic: User-Mode Linux {build.release} with time travel")[1].splitlines()[
            0
        ]
        assert "boots (" in line, text
    if not uml.installed_builds(time_travel=True):
        assert "--tcpnet-deterministic" in text and "dev/setup-uml-tt" in text
    assert not (tmp_path / "cache").exists()  # it changes nothing, not even the probe cache
    bad = subprocess.run([sys.executable, "-m", "pytest_tcpnet", "nurse"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "usage: python -m pytest_tcpnet doctor" in bad.stderr
