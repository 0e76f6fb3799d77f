"""Without CAP_NET_ADMIN/CAP_SYS_ADMIN the session re-runs itself in a user namespace and its labs still build.

"Not privileged" is made the way a container or CI job without privileges is: root with the two
capabilities dropped (setpriv). dev/test-rootless runs the whole suite as a real unprivileged user.
"""

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pytest_tcpnet
from pytest_tcpnet import netlink, rootless

REPO = os.path.dirname(os.path.dirname(pytest_tcpnet.__file__))
SETPRIV, UNSHARE = shutil.which("setpriv"), shutil.which("unshare")
pytestmark = pytest.mark.skipif(
    SETPRIV is None or UNSHARE is None or os.geteuid() != 0,
    reason="needs util-linux's setpriv and unshare, run as root (to drop capabilities)",
)
DROP_PRIVILEGE = [SETPRIV, "--bounding-set=-net_admin,-sys_admin", "--inh-caps=-net_admin,-sys_admin", "--"]

PROJECT = textwrap.dedent("""
    import os
    from pytest_tcpnet import Host, Link, rootless

    def test_a_lab_builds_and_measures(tcpnet):
        pair = tcpnet.pair(link=Link(rate="50mbit"), client=Host(sysctls={"net.ipv4.tcp_rmem": "4096 65536 262144"}))
        with open(os.environ["MARK"], "w") as f:
            f.write(" ".join(n.namespace for n in pair.nodes))
        with open(os.environ["MARK"] + ".netns", "w") as f:
            f.write(str(os.stat("/proc/self/ns/net").st_ino))
        result = pair.transfer(nbytes=500_000)
        assert rootless.inside()
        assert result.sysctls["client"]["net.ipv4.tcp_rmem"] == "4096 65536 262144"
        assert 30e6 < result.throughput_bps < 55e6  # shaped at 50 Mbit/s; measured 47-48 Mbit/s here

    def test_a_namespace_default_cc_not_allowed_falls_back_to_the_sockets(tcpnet):
        allowed = open("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read().split()
        available = open("/proc/sys/net/ipv4/tcp_available_congestion_control").read().split()
        cc = next((c for c in available if c not in allowed), None)
        if cc is None:
            return  # every loaded algorithm is allowed as a namespace default here
        pair = tcpnet.pair(server=Host(cc=cc))
        assert pair.socket_cc == {"server": cc}
        assert pair.transfer(nbytes=200_000).sender.buffers["cc"] == cc
""")


def _session(children, tmp_path, *args, prefix=(), env=None):
    (tmp_path / "test_project.py").write_text(PROJECT)
    environment = {k: v for k, v in os.environ.items() if k not in (rootless.INSIDE_ENV, rootless.MODE_ENV)}
    environment.update(PYTHONPATH=REPO, MARK=str(tmp_path / "mark"), **(env or {}))
    argv = [
        *prefix,
        *DROP_PRIVILEGE,
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-rs",
        *args,
        "test_project.py",
    ]
    return children.run(argv, cwd=tmp_path, env=environment, timeout=240)


def test_without_privilege_labs_build_in_a_user_namespace(children, tmp_path):
    out = _session(children, tmp_path, "--tcpnet-host-guard")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout
    assert "running this session rootless" in out.stderr
    # The rootless session shares the host's network namespace (without power over it): guarded from inside.
    assert "tcpnet host guard: host namespace unchanged" in out.stdout and "host guard" not in out.stderr
    # The lab's namespaces lived in the session's private /run/netns, never in the host's.
    names = (tmp_path / "mark").read_text().split()
    assert len(names) == 3 and not set(names) & set(os.listdir(netlink.NETNS_DIR))
    # ... while the session itself stayed in the host's network namespace (localhost, internet as usual).
    assert int((tmp_path / "mark.netns").read_text()) == os.stat("/proc/self/ns/net").st_ino


def test_rootless_also_runs_under_xdist(children, tmp_path):
    out = _session(children, tmp_path, "-n", "2")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout


def test_rootless_off_skips_lab_tests_saying_how_to_enable_it(children, tmp_path):
    out = _session(children, tmp_path, "--tcpnet-rootless=off")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 skipped" in out.stdout
    assert "CAP_NET_ADMIN" in out.stdout and "--tcpnet-rootless=auto" in out.stdout


# The session runs in a user namespace of its own whose user.max_user_namespaces is 0 (a per-namespace
# limit): exactly what a distribution forbidding unprivileged user namespaces looks like from inside.
FORBID_USERNS = [
    UNSHARE,
    "--user",
    "--map-root-user",
    "--",
    "sh",
    "-c",
    'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"',
    "forbid-userns",
]


def test_where_user_namespaces_are_forbidden_the_skip_names_the_setting(children, tmp_path):
    out = _session(children, tmp_path, prefix=FORBID_USERNS)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 skipped" in out.stdout
    assert "user.max_user_namespaces=0 forbids unprivileged user namespaces" in out.stdout
    assert "sudo sysctl -w user.max_user_namespaces=15000" in out.stdout


def test_rootless_on_where_forbidden_is_a_usage_error_naming_the_setting(children, tmp_path):
    out = _session(children, tmp_path, "--tcpnet-rootless=on", prefix=FORBID_USERNS)
    assert out.returncode == 4, out.stdout + out.stderr
    assert "--tcpnet-rootless=on, but user.max_user_namespaces=0" in out.stderr


def test_the_blockers_each_name_their_setting_and_the_fix():
    for path, _forbidding, what, how in rootless._BLOCKING_SETTINGS:
        assert what.split("=")[0].replace(".", "/") in path and how.startswith("sudo sysctl -w")


SLEEPER = textwrap.dedent("""
    import os, time

    def test_sleeps_with_a_pair(tcpnet):
        pair = tcpnet.pair()
        with open(os.environ["MARK"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(600)
""")


def _sleeping_rootless_session(children, tmp_path):
    (tmp_path / "test_sleeper.py").write_text(SLEEPER)
    environment = {k: v for k, v in os.environ.items() if k not in (rootless.INSIDE_ENV, rootless.MODE_ENV)}
    environment.update(PYTHONPATH=REPO, MARK=str(tmp_path / "mark"))
    proc = children.popen(
        [*DROP_PRIVILEGE, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_sleeper.py"],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    mark = tmp_path / "mark"
    children.wait_until(proc, lambda: mark.exists() and mark.read_text(), 60, "its test built a lab")
    return proc, int((tmp_path / "mark").read_text())


def _gone_within(pid, seconds):
    deadline = time.monotonic() + seconds
    while os.path.exists(f"/proc/{pid}"):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_sigterm_to_the_outer_pytest_tears_the_rootless_session_down(children, tmp_path):
    proc, inner = _sleeping_rootless_session(children, tmp_path)
    proc.send_signal(signal.SIGTERM)
    out, _ = children.communicate(proc, timeout=60)
    assert proc.returncode == 2, out
    assert "SIGTERM: tearing the labs down" in out and _gone_within(inner, 5)


def test_a_killed_outer_pytest_takes_the_rootless_session_with_it(children, tmp_path):
    proc, inner = _sleeping_rootless_session(children, tmp_path)
    proc.kill()  # SIGKILL: the outer runs no code; the session gets SIGTERM as its parent-death signal
    children.communicate(proc, timeout=30)
    assert _gone_within(inner, 30)
