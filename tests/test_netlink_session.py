"""Namespace sessions: created without a fork, every call lands in the namespace (never the host), errors named."""

import os
import threading

import pytest

from pytest_tcpnet import Link, netlink, rootless
from pytest_tcpnet.errors import LabError
from pytest_tcpnet.netlink import ownership
from pytest_tcpnet.netlink.namespaces import with_iproute

pytestmark = pytest.mark.tcpnet_needs("privilege")


@pytest.fixture
def name():
    name = f"{netlink.PREFIX}{netlink.owner_tag()}-session-{threading.get_ident() % 10000}"
    yield name
    netlink.remove_namespace(name)


def _link_names(ipr):
    return sorted(link.get_attr("IFLA_IFNAME") for link in ipr.get_links())


def test_calls_from_any_thread_reach_the_namespace_not_the_host(name):
    session = netlink.create_namespace(name, {"net.ipv4.tcp_rmem": "4096 8192 16384"})
    seen = []
    worker = threading.Thread(target=lambda: seen.append(with_iproute(name, _link_names)))
    worker.start()
    worker.join()
    assert seen == [["lo"]]  # pyroute2 would open a host-namespace socket for a new thread: ours does not
    assert with_iproute(name, _link_names) == ["lo"]
    assert netlink.read_sysctls(name, ["net.ipv4.tcp_rmem"]) == {"net.ipv4.tcp_rmem": "4096 8192 16384"}
    st = os.stat(netlink.namespace_path(name))
    assert ownership.namespace_records()[name]["inode"] == st.st_ino
    assert os.stat("/proc/self/ns/net").st_ino != st.st_ino  # our own thread never moved
    assert session.owned


def test_remove_leaves_no_name_and_no_record(name):
    netlink.create_namespace(name)
    netlink.remove_namespace(name)
    assert not os.path.lexists(netlink.namespace_path(name))
    assert name not in ownership.namespace_records()
    assert netlink.session_for(name) is None


def test_an_existing_name_is_refused_and_left_alone(name):
    netlink.create_namespace(name)
    with pytest.raises(LabError, match="already exists"):
        netlink.create_namespace(name)
    assert with_iproute(name, _link_names) == ["lo"]  # the first one is intact


def test_netlink_errors_name_the_step_and_the_namespace(name):
    netlink.create_namespace(name)
    with pytest.raises(LabError, match=rf"veth-nowhere.*{name}|{name}.*veth-nowhere"):
        netlink.shape_egress(name, "veth-nowhere", Link(rate="10mbit").toward_client)
    with pytest.raises(LabError, match=f"sysctl net.ipv4.tcp_rmem = 'nonsense' refused in namespace {name}"):
        netlink.write_sysctls(name, {"net.ipv4.tcp_rmem": "nonsense"})


def test_a_recycled_session_thread_serves_the_next_namespace_from_outside_the_last(name):
    first = netlink.create_namespace(name)
    thread = first._worker.thread
    made = os.stat(netlink.namespace_path(name)).st_ino
    netlink.remove_namespace(name)
    # Idle between sessions, the thread no longer holds the namespace it made (the kernel may free it):
    # it waits in our own namespace, or rootless in a private empty one.
    waiting = os.stat(f"/proc/self/task/{thread.native_id}/ns/net").st_ino
    assert waiting != made
    if not rootless.inside():
        assert waiting == os.stat("/proc/self/ns/net").st_ino
    second = netlink.create_namespace(name)
    assert second._worker.thread is thread  # reused, not a new thread
    assert with_iproute(name, _link_names) == ["lo"]
    assert os.stat(f"/proc/self/task/{thread.native_id}/ns/net").st_ino == os.stat(netlink.namespace_path(name)).st_ino


def test_batched_requests_name_the_refused_one_and_leave_the_socket_usable(name):
    session = netlink.create_namespace(name)
    with pytest.raises(LabError, match=rf"addr add index=99 .*{name}|{name}.*addr add index=99"):
        session.batch(
            "addressing",
            [
                ("link", "set", {"index": 1, "state": "up"}),
                ("addr", "add", {"index": 99, "address": "198.18.9.1", "prefixlen": 24}),
            ],
        )
    session.batch("addressing", [("addr", "add", {"index": 1, "address": "198.18.9.1", "prefixlen": 24})])
    (answer,) = session.query("reading", [("link", "get", {"index": 1})])
    assert answer[0].get_attr("IFLA_IFNAME") == "lo"
