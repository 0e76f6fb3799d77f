"""Replaying a Mahimahi-style trace (issue 22): examples/traces/steps.down, made here (its recipe is in
examples/traces/README.md), drives the link's rate second by second while a flow runs. Rate only, so the host
runs it: each change is htb's class changed in place (docs/schedules.md).
"""

from pathlib import Path

import pytest

from pytest_tcpnet import Link, Schedule, assert_follows_schedule, model

TRACE = Path(__file__).parent / "traces" / "steps.down"
LEVELS_MBIT = [24, 6, 36, 12, 48, 24]


@pytest.mark.tcpnet_needs("cubic")
def test_a_cubic_download_follows_a_replayed_trace(tcpnet):
    """The trace's six seconds (24, 6, 36, 12, 48, 24 Mbit/s of 1500-byte opportunities) become six rate steps; a
    6 s cubic download follows every phase within 10% of the model once settled (the default: 0.5 s; measured
    0.997-1.006x of each phase quiet, 0.995-1.011x beside two CPU hogs, 5 runs), each step acknowledged at or
    after its time (measured 0.17-0.26 ms late quiet, at most 0.66 ms beside the hogs) and within 5% of the 1 s
    phase it opens: the share of the phase a late step hands to the previous rate (how late is the scheduler's:
    benchmarks/bench_link_timer.py)."""
    schedule = Schedule.from_mahimahi(TRACE)
    assert [(at, model.parse_rate(value)) for at, value in schedule.steps] == [
        (float(second), mbit * 1e6) for second, mbit in enumerate(LEVELS_MBIT)
    ]
    result = tcpnet.pair(Link(rate=schedule)).transfer(duration=6, cc="cubic")
    figures = result.describe() + "\n" + "\n".join(map(str, result.link_changes))
    assert all(0 <= step["applied_at"] - step["at"] <= 0.05 * 1.0 for step in result.link_changes), figures
    judged = assert_follows_schedule(result, rel=0.10)
    assert [phase.number for phase, _, _ in judged] == list(range(6)), figures
