"""Seeded netem (Linux >= 6.6): a seeded lab's links lose the same packets on every run (docs/reports.md, "The same losses on every run")."""

import argparse

import pytest

from pytest_tcpnet import Cbr, Link
from pytest_tcpnet.lab import Lab
from pytest_tcpnet.netlink import netem_seed
from pytest_tcpnet.workload import Bulk

LOSSY = Link(rtt="4ms", to_server={"loss": "10%"})


def test_a_qdisc_s_seed_comes_from_the_lab_s_and_its_names_only():
    assert netem_seed(7, 0, "router/veth-cli") == netem_seed(7, 0, "router/veth-cli")
    seeds = {
        netem_seed(7, 0, "router/veth-cli"),
        netem_seed(7, 0, "router/veth-srv"),
        netem_seed(8, 0, "router/veth-cli"),
    }
    assert len(seeds) == 3 and all(0 <= s < 2**64 for s in seeds)


def test_the_seed_goes_in_netem_s_request_and_its_description():
    from pytest_tcpnet.netlink.qdisc import _describe_netem, _netem_kwargs

    way = LOSSY.toward_server
    kwargs = _netem_kwargs(way, seed=2**64 - 1)
    assert (14, b"\xff" * 8) in kwargs["options_extra"]  # TCA_NETEM_PRNG_SEED, a u64
    assert "seed=18446744073709551615" in _describe_netem(kwargs, way)
    assert "options_extra" not in _netem_kwargs(way)  # unseeded: the kernel draws one


def test_a_bad_seed_is_refused_before_anything_is_built():
    from pytest_tcpnet.session import _seed

    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(ValueError, match="seed: must be a whole number >= 0"):
            Lab(sweep=False, seed=bad)
    assert _seed("0x10") == 16
    for bad in ("-1", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="must be a whole number >= 0"):
            _seed(bad)


def _lost(seed):
    """The sequence numbers a 10% lossy link dropped of ~800 datagrams, under a lab seeded with `seed`."""
    with Lab(sweep=False, seed=seed) as lab:
        pair = lab.pair(link=LOSSY)
        (udp,) = pair.run(Bulk([Cbr("4mbit", duration=2, direction="upload")])).results
        netems = [q for qdiscs in pair.router_qdisc_stats().values() for q in qdiscs if q["kind"] == "netem"]
        # Read back: the kernel holds the seed the plan says was sent (or one of its own, unseeded).
        (plan,) = [line for lines in pair.qdisc_plan.values() for line in lines if "loss" in line]
        (held,) = [q["settings"]["seed"] for q in netems if q["settings"]["loss"]]
        assert (f"seed={held}" in plan) == (seed is not None), (plan, held)
    assert udp.sent > 700, udp.describe()
    received = {seq for seq, _, _ in udp.arrivals}
    return {seq for seq in range(700) if seq not in received}


@pytest.mark.seeded_netem
@pytest.mark.tcpnet_needs("privilege", "netem", "kernel>=6.6")
def test_a_seeded_link_loses_the_same_datagrams_on_every_run():
    first, again, other, unseeded = _lost(11), _lost(11), _lost(12), _lost(None)
    # 10% of 700: ~70 each (binomial sd ~8); the same seed, the same datagrams; another seed, another set.
    assert 40 < len(first) < 100, sorted(first)
    assert again == first
    assert other != first and unseeded != first


def test_each_test_s_lab_draws_from_the_session_seed_and_its_own_id():
    from pytest_tcpnet.session import _kernel_seeds_netem, describe_seed, lab_seed

    class Config:
        def __init__(self, seed):
            self.seed = seed

        def getoption(self, name, default=None):
            return self.seed

    assert lab_seed(Config(None), "t.py::a") is None and describe_seed(Config(None)) is None
    if _kernel_seeds_netem():
        assert lab_seed(Config(5), "t.py::a") == netem_seed(5, "t.py::a") != lab_seed(Config(5), "t.py::b")
        assert "each test's links draw from it" in describe_seed(Config(5))
    else:  # an older kernel: no seed, and the header says so
        assert lab_seed(Config(5), "t.py::a") is None
        assert "takes no seed (Linux 6.6 or later)" in describe_seed(Config(5))
