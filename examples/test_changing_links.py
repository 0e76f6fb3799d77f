"""Links that change while a flow runs (issue 22): an RTT step, BBR's and cubic's answers to a rate step, a lossy
spell, netem's full parameter set at each step, and RFC 8867's capacity schedule. Delay needs netem: the VM runs
these. Each step is applied in place and its time and the kernel's settings recorded (docs/schedules.md).
"""

import statistics

import pytest

from pytest_tcpnet import Host, Link, Schedule, assert_follows_schedule, model

pytestmark = pytest.mark.tcpnet_needs("netem", "cubic")


def _series_on_schedule_clock(result, field):
    """The sender's sampled field [(t, value)] with t on the schedule's clock."""
    offset = result.first_byte_at - result.schedule_origin
    return [(t + offset, value) for t, value in result.series(field)]


def test_the_sender_s_rtt_follows_a_route_change(tcpnet):
    """A 20 -> 80 ms RTT step at 2 s under a cubic download at 10 Mbit/s (a 20-packet queue, so the queue adds at
    most 24 ms): asserts the step's delay was read back from netem; in the second before the step the sender's
    smoothed RTT is the 20 ms path's (median at most the model's RTT under load, the path with its queue full:
    44.2 ms; p95 under 50 ms), and from 1 s after it the 80 ms path's (at or above 78 ms), every sample before
    under every one after; and the longer path costs the window-bound flow its rate: the cubic window the queue
    allowed at 20 ms (~40 packets) covers half the 80 ms path's BDP, and cubic grows it slowly (measured 9.5 then
    4.7-5.9 Mbit/s; the first phase fills the link, >= 90%).

    Measured under UML 6.1 and 6.12 (8 runs quiet, 16 beside a CPU hog on both cores), the second before the step:
    median 36.6-40.1 ms, p95 44.4-45.3, max 45.3-47.0; from 1 s after it, min 80.2-80.7. Single samples are the
    guest's scheduling too, not the path: fresh-clone CI run 22 (the hog, the VM examples' two guests) read a spike
    to 50.2 ms at 1.85 s (median 39.0, p95 45.1), and slow start's 62.3 ms at 0.48 s in an earlier run (so slow start
    is left out). In the 6.1 VM: 73 ms 0.16 s after the step, 81 ms from 0.24 s on. The tail before the step (p95,
    max) is judged beside a quiet host only (half a CPU or less used outside the session)."""
    link = Link(rate="10mbit", limit=20, rtt=Schedule([(0, "20ms"), (2, "80ms")]))
    result = tcpnet.pair(link, server=Host(cc="cubic")).transfer(duration=4, cc="cubic")
    figures = result.describe() + "\n" + "\n".join(map(str, result.link_changes))
    assert {round(step["settings"]["delay_s"], 6) for step in result.link_changes} == {0.040}, figures
    rtt = [(t, us / 1e6) for t, us in _series_on_schedule_clock(result, "rtt")]
    before, after = [v for t, v in rtt if 1.0 <= t < 2.0], [v for t, v in rtt if t >= 3.0]
    assert before and after, figures
    # The model's RTT under load for the first phase: the 20 ms path with cubic's window filling its 20-packet queue.
    (short, short_conditions), (long, _) = result.model_phases()
    full_queue = model.expected_throughput(short_conditions)
    figures += f"\nfirst phase: {full_queue.why}"
    assert statistics.median(before) <= full_queue.loaded_rtt_s, f"{figures}\nrtt: {rtt}"
    # A stalled guest only adds to an RTT: the longer path's floor holds beside any load.
    assert 0.078 <= min(after), f"{figures}\nrtt: {rtt}"
    if not result.beside_busy_host:
        assert statistics.quantiles(before, n=20)[-1] < 0.050, f"{figures}\nrtt: {rtt}"
        assert max(before) < 0.078, f"{figures}\nrtt: {rtt}"
    else:
        # Beside a busy host the guest waits for a CPU: fresh-clone CI run 68 (two spinners, 1.5 CPUs outside) saw
        # the sampler's 5 ms ticks come 20-31 ms apart at 1.35-1.45 s and the srtt climb to 85 ms there (p95 79 ms).
        # That is the host's time, not the path's: the tail is not judged, and the failure message must say so.
        assert "host: other processes kept" in result.describe(), result.describe()
    assert short.goodput_bps >= 0.9 * model.link_goodput(10e6) and long.goodput_bps < short.goodput_bps, figures


@pytest.mark.tcpnet_needs("bbr")
def test_bbr_takes_a_doubled_rate_within_two_seconds(tcpnet):
    """The BBR paper's step: 10 -> 20 Mbit/s at 3 s and back to 10 at 7 s, 40 ms RTT, a bbr download for 10 s,
    and the same for cubic beside it. Asserts bbr reaches >= 90% of the 20 Mbit/s payload rate within 2 s of the
    step up (measured: within 0.6 s) and both fill each phase's link once settled for 1 s (within 20%: 0.96-1.00
    quiet; beside a CPU hog the emulated guest paced bbr at 0.87 and 0.85 of the 20 Mbit/s phase, the latter in
    fresh-clone CI run ci46). Cubic through the
    default 1000-packet queue takes the new rate at once - its standing queue drains at 20 Mbit/s - at the
    price of a smoothed RTT of 120-300 ms growing to 850 ms in the last phase (measured). After the step down,
    bbr's max filter keeps the old rate for about ten rounds: its srtt read 180 ms for 1.7 s and 65-90 ms after,
    not back under 1.25x the base (50 ms) within 2 s as the paper's figure shows (the paper's path was not
    emulated; here the guest's srtt was 53-62 ms at 10 Mbit/s even before the steps): reported, not asserted:
    the test prints each cc's lowest srtt before the steps and its srtt range in the 2 s after the step down
    (pytest -rA shows it)."""
    link = Link(rtt="40ms", rate=Schedule([(0, "10mbit"), (3, "20mbit"), (7, "10mbit")]))
    results = {cc: tcpnet.pair(link, server=Host(cc=cc)).transfer(duration=10, cc=cc) for cc in ("bbr", "cubic")}
    figures = "\n".join(f"{cc}:\n{r.describe()}" for cc, r in results.items())
    bbr = results["bbr"]
    offset = bbr.first_byte_at - bbr.schedule_origin
    rates = [(t + offset, bps) for t, bps in bbr.rate_series(0.25)]
    reached = [t for t, bps in rates if 3.0 < t and bps >= 0.9 * model.link_goodput(20e6)]
    assert reached and reached[0] <= 3.0 + 2.0, f"{figures}\nbbr rate: {rates}"
    for cc, result in results.items():
        srtt_ms = [(t, us / 1e3) for t, us in _series_on_schedule_clock(result, "rtt")]
        after = [ms for t, ms in srtt_ms if 7.0 <= t < 9.0]
        before = [ms for t, ms in srtt_ms if t < 3.0]
        print(
            f"{cc}: srtt before the steps, lowest {before and round(min(before), 1)} ms; 0-2 s after the step "
            f"down {after and round(min(after), 1)}-{after and round(max(after), 1)} ms"
        )
    for result in results.values():
        judged = assert_follows_schedule(result, rel=0.2, settle=1.0, against="link")
        assert [phase.number for phase, _, _ in judged] == [0, 1, 2], figures


def test_a_window_bound_flow_follows_its_model_but_cannot_fill_the_faster_phase(tcpnet):
    """10 -> 40 -> 10 Mbit/s at 20 ms, the receiver's SO_RCVBUF 64 KB: its window (6.1: 64240 B, 6.12: 76.9 KB)
    carries about 25-31 Mbit/s per 20 ms, so it fills the 10 Mbit/s phases and not the 40 Mbit/s one. Judged
    against the model, which knows the window, it follows every phase within 25% (measured 1.00x in the 10 Mbit/s
    phases; 0.876x on 6.1 and 0.899x on 6.12 in the 40 Mbit/s one, where the guest's 1-5 ms per round trip weigh
    on a window-bound flow, as in C1); judged against the link, it fails naming phase 1 alone, with the expected
    and measured figures (21.1 and 27.1 Mbit/s against 38.26)."""
    link = Link(rtt="20ms", rate=Schedule([(0, "10mbit"), (2, "40mbit"), (4, "10mbit")]))
    result = tcpnet.pair(link, server=Host(cc="cubic")).transfer(duration=6, rcvbuf=65536, cc="cubic")
    judged = assert_follows_schedule(result, rel=0.25)
    assert [phase.number for phase, _, _ in judged] == [0, 1, 2], result.describe()
    with pytest.raises(AssertionError) as failure:
        assert_follows_schedule(result, rel=0.15, against="link")
    text = str(failure.value)
    assert text.startswith("1 of 3 phases outside ±15% of the link rate: phase 1 (both ways: 40 Mbit/s"), text
    assert "38.26 Mbit/s" in text and "OUTSIDE" in text, text


@pytest.mark.random_loss
def test_a_lossy_spell_costs_its_phase_and_the_flow_recovers(tcpnet):
    """5% loss from 2 s to 4 s on a 20 Mbit/s, 20 ms path (100-packet queue), a 6 s cubic download: asserts the
    lossy phase carries under half of what the phase before it did, retransmits what 5% of its segments cost (0.5-2x:
    measured 0.87x and 1.04x, 41 and 44 resent; ~42 events spread about 15% by chance alone), more than the phase
    after it, and the flow grows back afterwards (the last phase above the lossy one). The first phase is not
    compared: its slow start overflows the 100-packet queue, 9 resent once and 53 another time (6.1 VM)."""
    link = Link(rate="20mbit", rtt="20ms", limit=100, loss=Schedule([(0, 0), (2, "5%"), (4, 0)]))
    result = tcpnet.pair(link, server=Host(cc="cubic")).transfer(duration=6, cc="cubic")
    figures = result.describe()
    clean, lossy, after = result.phases
    assert lossy.link.toward_client.loss == 0.05 and after.link.toward_client.loss == 0, figures
    assert lossy.goodput_bps < 0.5 * clean.goodput_bps, figures
    segments = lossy.goodput_bps * (lossy.end_s - lossy.start_s) / 8 / 1448
    assert 0.5 * 0.05 * segments <= lossy.retransmits <= 2 * 0.05 * segments, (segments, figures)
    assert lossy.retransmits > after.retransmits, figures
    assert after.goodput_bps > lossy.goodput_bps, figures


def test_each_step_carries_netem_s_whole_parameter_set(tcpnet):
    """A step that raises the delay, drops corrupt, jitter and duplicate to zero, starts reordering and deepens the
    queue, with 1% loss throughout: netem's change keeps what it is not sent (sch_netem's netem_change), so the
    zeros go explicitly; asserts the kernel then holds delay 30 ms one way, loss 1%, corrupt, jitter and
    duplicate 0, reorder 5%, and the limit the new phase needs (its delay line plus the 300-packet queue)."""
    link = Link(
        rtt=Schedule([(0, "20ms"), (1, "60ms")]),
        loss="1%",
        corrupt=Schedule([(0, "1%"), (1, 0)]),
        jitter=Schedule([(0, "5ms"), (1, 0)]),
        duplicate=Schedule([(0, "1%"), (1, 0)]),
        reorder=Schedule([(0, 0), (1, "5%")]),
        limit=Schedule([(0, 100), (1, 300)]),
    )
    result = tcpnet.pair(link).transfer(duration=2)
    figures = result.describe() + "\n" + "\n".join(map(str, result.link_changes))
    assert len(result.link_changes) == 2, figures  # both directions, one message
    limit = link.at(1).toward_client.netem_limit_packets()
    for step in result.link_changes:
        held = step["settings"]
        assert held["delay_s"] == pytest.approx(0.030, abs=1e-6) and held["loss"] == pytest.approx(1.0), figures
        assert held["corrupt"] == 0 and held["jitter_s"] == 0 and held["duplicate"] == 0, figures
        assert held["reorder"] == pytest.approx(5.0) and held["limit"] == limit, (limit, figures)


@pytest.mark.tcpnet_needs("bbr")
def test_rfc8867_variable_capacity(tcpnet):
    """RFC 8867 section 5.1's capacity schedule (1, 2.5, 0.6 and 1 Mbit/s, 50 ms one way), its phases at a tenth of
    their length (4, 2, 2, 2 s): a bbr download follows each phase within 15% of the model after 1 s of settling
    (measured in the 6.1 VM: 1.00, 1.00, 1.00, 0.98x; srtt 150-650 ms, no drop: bbr bounds its own queue). Any drop
    costs the reader a stall of about an srtt (head-of-line), which a 2 s phase cannot absorb: through a 60-packet
    queue bbr overflowed once after the step down to 0.6 Mbit/s (0.54x in that phase, 1 run of 3) and cubic in
    the 2.5 Mbit/s phase (0.72x); cubic through 200 packets followed at 1.00x, its srtt reaching 2.3 s."""
    schedule = Schedule([(0, "1mbit"), (4, "2.5mbit"), (6, "0.6mbit"), (8, "1mbit")])
    result = tcpnet.pair(Link(rate=schedule, delay="50ms"), server=Host(cc="bbr")).transfer(duration=10, cc="bbr")
    judged = assert_follows_schedule(result, rel=0.15, settle=1.0)
    assert [phase.number for phase, _, _ in judged] == [0, 1, 2, 3], result.describe()
