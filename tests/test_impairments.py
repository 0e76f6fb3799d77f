"""What a link applied against what it was asked: netem's correlated loss, a shaper changed behind the lab's back.

The logic (chance, causes) on counters; then real links in a kernel with sch_netem (CI's VM session) whose
counters say what the traffic met.
"""

import pytest

from pytest_tcpnet import GilbertElliott, Link, NetemCorrelationWarning, assert_throughput_within
from pytest_tcpnet.analysis.impairments import AppliedLoss, applied_losses
from pytest_tcpnet.model.netem import effective_rate

pytest_plugins = ["pytester"]


def _applied(asked, lost, offered, correlation=0.0, bursty=0.0):
    expected = effective_rate(asked, correlation) if correlation else asked
    return AppliedLoss("veth-cli", "toward_client", asked, correlation, bursty, expected, offered, lost)


def test_chance_is_judged_with_the_binomial_spread():
    # 2% of 2000 packets: 40 expected, sd 6.3; 54-60 (as measured uncorrelated) is chance, 0 is not, 25 is not.
    assert _applied(0.02, 54, 2000).as_configured and _applied(0.02, 26, 2000).as_configured
    assert not _applied(0.02, 0, 2000).as_configured and not _applied(0.02, 10, 2000).as_configured
    # Too few packets to judge: 1% of 300 expects 3, and none is not unusual.
    assert _applied(0.01, 0, 300).as_configured
    # A huge sample does not flag a trivial difference (2.05% of 10 million).
    assert _applied(0.02, 205_000, 10_000_000).as_configured


def test_bursty_losses_get_a_wider_spread():
    # Gilbert-Elliott with bursts of 4 (r = 0.25): lag-one correlation ~0.74, dispersion ~6.7x the binomial's.
    model = GilbertElliott(p=0.0051, r=0.25)
    bursty = 1 - model.p - model.r
    assert _applied(model.mean_loss, 10, 2000, bursty=bursty).as_configured  # z = -1.8 with the burst spread
    assert not _applied(model.mean_loss, 10, 2000).as_configured  # the same count judged as independent: z = -4.8
    assert not _applied(model.mean_loss, 0, 20_000, bursty=bursty).as_configured


def test_a_correlated_loss_is_named_as_the_cause_and_a_wrong_shaper_is_not():
    collapsed = _applied(0.02, 0, 2130, correlation=0.25)
    assert not collapsed.as_configured and "correlated draw applies 0.005%" in collapsed.likely_cause
    text = collapsed.describe()
    assert text.startswith("impairment not as configured: toward client (veth-cli): loss 0% applied (0 of 2130")
    assert "asked 2% with 25% correlation" in text and "GilbertElliott" in text
    wrong = _applied(0.02, 0, 2130)
    assert "the qdisc on the path is not the one asked for" in wrong.likely_cause


def test_counters_become_applied_losses():
    way = Link(rate="20mbit", rtt="10ms", loss="2%").toward_client
    qdiscs = {
        "veth-cli": [
            {"kind": "htb", "handle": 0x10000, "parent": 0xFFFFFFFF, "packets": 2000, "drops": 45},
            {"kind": "netem", "handle": 0x100000, "parent": 0x10001, "packets": 1960, "drops": 45},
            {"kind": "pfifo", "handle": 0x80100000, "parent": 0x100000, "packets": 1960, "drops": 5},
        ]
    }
    (applied,) = applied_losses(qdiscs, {"veth-cli": ("toward_client", way)})
    assert (applied.lost, applied.offered) == (40, 2000) and applied.applied == 0.02 and applied.as_configured
    # No loss asked, or a changing link, or no netem: nothing to judge.
    assert applied_losses(qdiscs, {"veth-cli": ("toward_client", Link(rate="20mbit").toward_client)}) == []
    assert applied_losses({"veth-cli": qdiscs["veth-cli"][:1]}, {"veth-cli": ("toward_client", way)}) == []


def test_a_link_warns_when_netem_would_not_apply_its_correlated_loss():
    with pytest.warns(NetemCorrelationWarning, match=r"loss 2% with loss_correlation 25%.*fires at 0\.005%"):
        link = Link(rate="20mbit", rtt="10ms", loss="2%", loss_correlation="25%")
    assert link.toward_client.effective_loss == pytest.approx(0.00005, abs=0.0001)
    # 20% at 25% correlation fires at ~10%: warned too; 30% at 25% (23%) as well; uncorrelated never.
    with pytest.warns(NetemCorrelationWarning, match="fires at 10.1%"):
        Link(rtt="10ms", loss="20%", loss_correlation="25%")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Link(rtt="10ms", loss="2%")
        Link(rtt="10ms", loss="50%", loss_correlation="25%")  # the middle of the range survives the averaging


@pytest.mark.tcpnet_needs("netem")
def test_correlated_loss_that_netem_does_not_apply_is_reported_and_the_model_predicts_what_it_does(tcpnet):
    """The case a user met: 2% loss with 25% correlation on a 20 Mbit/s, 10 ms path dropped nothing while the model
    predicted a loss-bound flow. Now the counters say what the link applied, the description says it is not what
    was asked and why, and the model predicts from what netem really drops (the link's rate binds)."""
    with pytest.warns(NetemCorrelationWarning):
        link = Link(rate="20mbit", rtt="10ms", loss="2%", loss_correlation="25%")
    result = tcpnet.pair(link=link).transfer(duration=3, cc="cubic")
    data = [a for a in result.applied_impairments if a.direction == "toward_client"]
    assert len(data) == 1 and data[0].offered > 1000, result.describe()
    assert data[0].lost <= 2 and not data[0].as_configured, result.describe()
    assert "impairment not as configured" in result.describe() and "correlated draw" in result.describe()
    assert result.impairment_mismatches
    assert_throughput_within(result, rel=0.15)  # the model: link-bound, as the flow was


@pytest.mark.tcpnet_needs("netem")
def test_uncorrelated_loss_is_applied_as_asked(tcpnet):
    result = tcpnet.pair(link=Link(rate="20mbit", rtt="10ms", loss="2%")).transfer(duration=3, cc="cubic")
    (data,) = [a for a in result.applied_impairments if a.direction == "toward_client"]
    assert data.as_configured and 0.01 < data.applied < 0.03 and data.lost > 10, result.describe()
    assert not result.impairment_mismatches and "not as configured" not in result.describe()


WRONG_SHAPER = """
import pytest
from pytest_tcpnet import Link

@pytest.mark.tcpnet_needs("netem")
def test_a_lossy_link(tcpnet):
    pair = tcpnet.pair(link=Link(rate="20mbit", rtt="10ms", loss="5%"))
    # Behind the lab's back: the router's netem toward the client now loses nothing.
    pair.router.run(["tc", "qdisc", "replace", "dev", "veth-cli", "parent", "1:1", "handle", "10:", "netem",
                     "delay", "5ms", "limit", "1000"], check=True)
    result = pair.transfer(duration=2, cc="cubic")
    assert result.nbytes > 0
"""


@pytest.mark.tcpnet_needs("netem")
@pytest.mark.parametrize("mode, outcome", [("warn", "passed"), ("fail", "failed"), ("off", "passed")])
def test_a_shaper_changed_behind_the_lab_s_back_is_caught(pytester, monkeypatch, mode, outcome):
    """A deliberately wrong shaper: the test's own assertions pass, the counters show 0 of ~1900 packets lost
    against 5% asked, and --tcpnet-verify-impairments decides: a warning naming it, a failure, or nothing."""
    from pathlib import Path

    import pytest_tcpnet

    monkeypatch.setenv("PYTHONPATH", str(Path(pytest_tcpnet.__file__).parents[1]))
    pytester.makepyfile(test_wrong=WRONG_SHAPER)
    result = pytester.runpytest("-p", "no:cacheprovider", f"--tcpnet-verify-impairments={mode}")
    result.assert_outcomes(**{outcome: 1})
    out = result.stdout.str()
    named = "impairment not as configured: toward client (veth-cli): loss 0% applied"
    assert (named in out) is (mode != "off"), out
    if mode == "fail":
        assert "the path did not apply the impairment the test asked for" in out
        assert "the qdisc on the path is not the one asked for" in out


@pytest.mark.tcpnet_needs("netem")
@pytest.mark.parametrize("loss, correlation", [("10%", None), ("2%", "25%"), ("20%", "25%"), ("30%", "50%")], ids=str)
def test_netem_applies_what_its_own_arithmetic_says(tcpnet, loss, correlation):
    """The table in docs/reports.md, measured: 2 s of 5 Mbit/s UDP (~1000 datagrams) beside a small download toward
    the client through netem's loss; the loss the counters show is what model.netem.effective_rate gives for the
    kernel's formula (within chance, judged as the checks judge it), not the loss asked."""
    import warnings

    from pytest_tcpnet import Cbr, Flow

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NetemCorrelationWarning)
        link = Link(rtt="10ms", to_client={"loss": loss, "loss_correlation": correlation})
    both = tcpnet.pair(link=link).concurrent([Flow(nbytes=200_000), Cbr(rate="5mbit", duration=2)])
    (applied,) = [a for a in both.flows[0].applied_impairments if a.direction == "toward_client"]
    assert applied.offered > 900, both.describe()
    assert not applied.differs_from(applied.expected), (applied, applied.expected, both.describe())
    if applied.offered * applied.expected < 1:  # 2% at 25%: netem's arithmetic expects no loss at all
        assert applied.lost <= 2, (applied, both.describe())
