"""Hypothesis strategies: validated at once, absent impairments stay absent, shrink toward simple paths."""

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from pytest_tcpnet import Host, Link, netlink, strategies


@given(strategies.links(rate=(10e6, 80e6)))
@settings(max_examples=30)
def test_rate_only_links_need_no_netem(link):
    assert isinstance(link, Link) and not link.needs_netem
    assert 10e6 <= link.rate_bps <= 80e6 and link.rtt_s == 0


@given(strategies.links(rtt=("5ms", "200ms"), loss=(0.0, 0.02)))
@settings(max_examples=30)
def test_ranges_are_respected(link):
    assert 0.005 - 1e-9 <= link.rtt_s <= 0.2 + 1e-9
    assert 0 <= link.toward_client.loss <= 0.02


def test_fixed_values_and_strategies_are_taken_as_given():
    link = find(strategies.links(rtt="20ms", rate=st.just(50e6)), lambda _: True)
    assert link == Link(rtt="20ms", rate=50e6)


def test_shrinks_toward_the_simplest_path():
    # The smallest RTT that still "fails" a predicate: shrinking must walk down to it.
    link = find(strategies.links(rtt=("5ms", "200ms")), lambda link: link.rtt_s >= 0.05)
    assert link.rtt_s == pytest.approx(0.05, rel=0.02)
    size = find(strategies.buffer_sizes("4kb", "256kb"), lambda n: n >= 10_000)
    assert 10_000 <= size <= 10_100


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda: strategies.links(rtt=("200ms", "5ms")), "rtt"),
        (lambda: strategies.links(loss=(0, 2)), "loss"),
        (lambda: strategies.links(rate="fast"), "rate"),
        (lambda: strategies.buffer_sizes("256kb", "4kb"), "buffer_sizes"),
        (lambda: strategies.hosts(cc=["cubic", "turbo"]), "cc"),
    ],
)
def test_bad_arguments_fail_at_once(call, field):
    with pytest.raises((ValueError, TypeError), match=field):
        call()


@given(strategies.hosts(cc=["cubic", "reno"], rmem=(4096, 65536)))
@settings(max_examples=20)
def test_hosts_pin_buffers_and_pick_a_cc(host):
    assert isinstance(host, Host) and host.cc in ("cubic", "reno")
    low, default, high = host.sysctls["net.ipv4.tcp_rmem"].split()
    assert low == default == high and 4096 <= int(low) <= 65536


def test_sweep_profiles_are_registered():
    assert strategies.sweep.deadline is None and strategies.sweep.max_examples <= 10
    assert strategies.sweep_ci.derandomize and settings.get_profile(strategies.SWEEP_CI_PROFILE) == strategies.sweep_ci


@pytest.mark.tcpnet_needs("htb")
def test_a_pair_per_example_leaves_nothing_behind(tcpnet):
    mine = netlink.PREFIX + netlink.owner_tag() + "-"  # other sessions build and remove theirs meanwhile

    def own_namespaces():
        return {name for name in netlink.lab_namespaces() if name.startswith(mine)}

    before = own_namespaces()
    seen = []

    @settings(parent=strategies.sweep, max_examples=3, database=None)
    @given(link=strategies.links(rate=(20e6, 50e6)))
    def sweep(link):
        with tcpnet.pair(link=link) as pair:
            seen.append(pair.transfer(nbytes=200_000).throughput_bps)
        assert own_namespaces() == before  # gone at the end of each example, not of the test

    sweep()
    assert len(seen) == 3 and all(bps > 0 for bps in seen)
