"""The host guard names every change to a namespace's network configuration, and fails a session that made one.

Changes are planted only in namespaces these tests create: the host itself is never touched.
"""

import itertools
import os
import shutil
import sys
import textwrap

import pytest

import pytest_tcpnet
from pytest_tcpnet import hostguard, netlink
from pytest_tcpnet.netlink.namespaces import with_iproute

pytestmark = pytest.mark.tcpnet_needs("privilege")

REPO = os.path.dirname(os.path.dirname(pytest_tcpnet.__file__))
_names = itertools.count()


@pytest.fixture
def scratch_namespace():
    """A throwaway namespace named like a lab's (so the sweeper removes it if this process dies)."""
    name = f"{netlink.PREFIX}{netlink.owner_tag()}-guard{next(_names)}"
    netlink.create_namespace(name)
    try:
        with_iproute(name, lambda ipr: ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up"))
        yield name
    finally:
        netlink.remove_namespace(name)


def _add_link(ipr):
    ipr.link("add", ifname="planted0", kind="veth", peer={"ifname": "planted1"})


def _add_address(ipr):
    ipr.addr("add", index=ipr.link_lookup(ifname="lo")[0], address="198.18.255.1", prefixlen=32)


def _add_route_in_another_table(ipr):
    ipr.route("add", dst="198.19.255.0/24", oif=ipr.link_lookup(ifname="lo")[0], table=100)


def _add_ipv6_route(ipr):
    ipr.route("add", family=10, dst="2001:db8::/64", oif=ipr.link_lookup(ifname="lo")[0])


def _add_rule(ipr):
    ipr.rule("add", table=100, priority=123, src="198.18.0.0", src_len=15)


def _add_qdisc(ipr):
    ipr.tc("add", "pfifo", index=ipr.link_lookup(ifname="lo")[0], handle=0x10000)


PLANTS = {
    "links": _add_link,
    "addresses": _add_address,
    "routes": _add_route_in_another_table,
    "routes ": _add_ipv6_route,
    "rules": _add_rule,
    "qdiscs": _add_qdisc,
}


@pytest.mark.parametrize("kind", PLANTS)
def test_a_planted_change_is_named(scratch_namespace, kind):
    before = netlink.run_in_namespace(scratch_namespace, hostguard.snapshot)
    assert hostguard.differences(before, netlink.run_in_namespace(scratch_namespace, hostguard.snapshot)) == []
    with_iproute(scratch_namespace, PLANTS[kind])
    changes = hostguard.differences(before, netlink.run_in_namespace(scratch_namespace, hostguard.snapshot))
    assert any(line.startswith(kind.strip() + ":") for line in changes), changes


def test_a_changed_sysctl_is_named_with_both_values(scratch_namespace):
    before = netlink.run_in_namespace(scratch_namespace, hostguard.snapshot)
    old = " ".join(before["sysctls"]["net/ipv4/tcp_rmem"].split())
    netlink.write_sysctls(scratch_namespace, {"net.ipv4.tcp_rmem": "4096 8192 16384"})
    changes = hostguard.differences(before, netlink.run_in_namespace(scratch_namespace, hostguard.snapshot))
    assert changes == [f"sysctl net.ipv4.tcp_rmem: '{old}' -> '4096 8192 16384'"]


PROJECT = textwrap.dedent("""
    import os, subprocess
    from pytest_tcpnet import Link

    def test_a_lab_that_cleans_up(tcpnet):
        assert tcpnet.pair(link=Link(rate="50mbit")).transfer(nbytes=200_000).throughput_bps > 0

    def test_plants_a_link_when_asked():
        if os.environ.get("PLANT"):
            subprocess.run(["ip", "link", "add", "planted0", "type", "veth", "peer", "name", "planted1"], check=True)
""")


def _guarded_session(children, tmp_path, plant):
    (tmp_path / "test_project.py").write_text(PROJECT)
    env = dict(os.environ, PYTHONPATH=REPO, PLANT="1" if plant else "")
    # Its own network namespace is this session's "host": a plant there never reaches the real one.
    argv = [
        shutil.which("unshare"),
        "--net",
        "--",
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--tcpnet-host-guard",
        "test_project.py",
    ]
    return children.run(argv, cwd=tmp_path, env=env, timeout=180)


@pytest.mark.skipif(shutil.which("ip") is None or shutil.which("unshare") is None, reason="needs iproute2's ip")
def test_a_session_that_changes_nothing_passes_the_guard(children, tmp_path):
    out = _guarded_session(children, tmp_path, plant=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout and "tcpnet host guard: host namespace unchanged" in out.stdout


@pytest.mark.skipif(shutil.which("ip") is None or shutil.which("unshare") is None, reason="needs iproute2's ip")
def test_a_session_that_changes_its_host_fails_naming_the_change(children, tmp_path):
    out = _guarded_session(children, tmp_path, plant=True)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 passed" in out.stdout  # every test passed: the guard alone fails the session
    assert "tcpnet host guard: the host namespace changed" in out.stdout
    assert "links: removed [], added [('planted0'" in out.stdout
