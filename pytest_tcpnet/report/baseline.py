"""Baselines: flows saved from repeated runs, and a verdict on whether a new run's figure moved beyond their spread.

A baseline is a results file that several sessions appended to (``--tcpnet-baseline-mode=save``,
run it five times or more). A flow is known by its test id, its number within the test and the
kernel; its conditions (link, buffers, sysctls) are not part of the key, so a test whose buffer
shrank is compared with what it measured before and the table names what changed.

The tolerance is learned, not guessed: the saved runs of a flow give its mean and spread, and a
new figure moved when it falls outside their 99.9% prediction interval (Student's t with n-1
degrees of freedom, times sqrt(1/m + 1/n) for the mean of m new runs). A flow cannot claim to be
steadier than the baseline's typical flow: its relative spread is at least the median of all
flows' (flows whose runs happen to agree to the bit would otherwise fail on any jitter). Nor can it
be judged finer than its clock: the tolerance is at least TIMING_FLOOR_S of the flow's duration.
"""

import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from .merge import flow_key
from .results_file import read_rows
from .table import MISSING, format_table, rate_cell, short_test

__all__ = ["MIN_RUNS", "TIMING_FLOOR_S", "Baseline", "Judgement", "baseline_table", "load_baseline", "baseline_key"]

#: Saved runs of a flow needed before its spread is known well enough to judge it.
MIN_RUNS = 3
CONFIDENCE = 0.999
#: The least a flow's figure is trusted to: this much of its duration. The start and end of a flow are timed by
#: processes the host schedules, so a busy host moves an unchanged flow's figure by more than its saved runs'
#: spread; twice the shift measured so (docs/reports.md, "Baselines").
TIMING_FLOOR_S = 0.025

# Two-sided 99.9% quantiles of Student's t (t_0.9995) by degrees of freedom; past the table, the
# entry for the largest tabled df below (a little wide, never narrow), then the normal's 3.291.
_T_9995 = {
    1: 636.62,
    2: 31.599,
    3: 12.924,
    4: 8.610,
    5: 6.869,
    6: 5.959,
    7: 5.408,
    8: 5.041,
    9: 4.781,
    10: 4.587,
    11: 4.437,
    12: 4.318,
    13: 4.221,
    14: 4.140,
    15: 4.073,
    16: 4.015,
    17: 3.965,
    18: 3.922,
    19: 3.883,
    20: 3.850,
    25: 3.725,
    30: 3.646,
    40: 3.551,
    60: 3.460,
    120: 3.373,
}


def t_quantile(df):
    """Student's t two-sided 99.9% quantile for df degrees of freedom (df >= 1)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df > 120:
        return 3.373
    return _T_9995[max(d for d in _T_9995 if d <= df)]


def baseline_key(row):
    """(test, flow number, kernel): what stays the same when the code under test changes."""
    return (row.get("test"), row.get("flow", 0), row.get("kernel"))


def conditions(row):
    """The conditions a flow ran under, as comparable text: link, requested buffers, sysctls, cc, direction."""
    key = flow_key(row)
    return {
        "direction": key[2],
        "link": key[3],
        "SO_SNDBUF": key[4],
        "SO_RCVBUF": key[5],
        "client sysctls": dict(key[6][0]),
        "server sysctls": dict(key[6][1]),
        "cc": row.get("cc"),
    }


def _run_id(row):
    run = row.get("run") or {}
    return run.get("id") or (run.get("host"), run.get("started"), row.get("source"))


@dataclass(frozen=True)
class Judgement:
    """One flow of a new run against the baseline: moved, held, or not judged (and why)."""

    key: tuple
    verdict: str  # "moved", "held" or "not judged"
    after_bps: float | None
    before_bps: float | None = None
    runs: int = 0
    tolerance: float | None = None  # relative half-width of the prediction interval, or the timing floor
    reason: str = ""
    changed: dict = field(default_factory=dict)  # {condition: (before, after)}
    basis: str = ""  # what set the tolerance

    @property
    def change(self):
        """Relative change of the figure (after / before - 1), or None."""
        if self.before_bps and self.after_bps is not None:
            return self.after_bps / self.before_bps - 1
        return None

    def describe(self):
        """One sentence: what moved by how much against what tolerance, and what conditions changed."""
        test = short_test(self.key[0]) + (f" #{self.key[1]}" if self.key[1] else "")
        if self.verdict == "not judged":
            return f"{test}: not judged ({self.reason})"
        word = "slower" if self.change < 0 else "faster"
        text = (
            f"{test} on {self.key[2] or 'an unknown kernel'}: {rate_cell(self.after_bps)} against "
            f"{rate_cell(self.before_bps)} over {self.runs} saved run(s), {abs(self.change):.1%} {word}; "
            f"tolerance {self.tolerance:.1%} ({self.basis})"
        )
        if self.changed:
            text += "; conditions changed: " + ", ".join(
                f"{name} {_show(b)} -> {_show(a)}" for name, (b, a) in self.changed.items()
            )
        return text


class Baseline:
    """Saved flows grouped by baseline_key; judges new rows against them."""

    def __init__(self, rows, *, path="baseline"):
        self.path = path
        self.flows = {}
        for row in rows:
            if isinstance(row.get("measured_bps"), (int, float)) and row.get("outcome") in (None, "passed"):
                self.flows.setdefault(baseline_key(row), []).append(row)
        spreads = [s for s in (self._own_spread(rows) for rows in self.flows.values()) if s is not None]
        #: The median relative spread of the baseline's flows: the least any flow is credited with.
        self.typical_spread = statistics.median(spreads) if spreads else None

    @property
    def runs(self):
        """How many distinct sessions saved into this baseline."""
        return len({_run_id(row) for rows in self.flows.values() for row in rows})

    @staticmethod
    def _own_spread(rows):
        values = [row["measured_bps"] for row in rows]
        if len(values) < MIN_RUNS or not statistics.fmean(values):
            return None
        return statistics.stdev(values) / statistics.fmean(values)

    def judge(self, rows):
        """One Judgement per new row; several rows of one key (repeated new runs) are judged by their mean."""
        grouped = {}
        for row in rows:
            grouped.setdefault(baseline_key(row), []).append(row)
        return [self._judge(key, new) for key, new in grouped.items()]

    def _judge(self, key, new):
        values = [r["measured_bps"] for r in new if isinstance(r.get("measured_bps"), (int, float))]
        after = statistics.fmean(values) if values else None
        saved = self.flows.get(key)
        if after is None:
            return Judgement(key, "not judged", None, reason="this run measured no throughput")
        if not saved:
            return Judgement(key, "not judged", after, reason=f"not in {self.path}")
        before = [r["measured_bps"] for r in saved]
        base = statistics.fmean(before)
        if len(before) < MIN_RUNS:
            return Judgement(
                key,
                "not judged",
                after,
                base,
                len(before),
                reason=f"{len(before)} saved run(s), {MIN_RUNS} needed to learn the spread",
            )
        variants = {repr(sorted(conditions(r).items())) for r in saved}
        if len(variants) > 1:
            return Judgement(
                key,
                "not judged",
                after,
                base,
                len(before),
                reason="its conditions differ between the saved runs (a hypothesis sweep?)",
            )
        spread = max(self._own_spread(saved), self.typical_spread or 0.0)
        tolerance = t_quantile(len(before) - 1) * spread * math.sqrt(1 / len(values) + 1 / len(before))
        basis = f"the saved runs' {CONFIDENCE:.1%} prediction interval"
        durations = [
            r["duration_s"] for r in saved if isinstance(r.get("duration_s"), (int, float)) and r["duration_s"] > 0
        ]
        if durations and TIMING_FLOOR_S / statistics.median(durations) > tolerance:
            duration = statistics.median(durations)
            tolerance = TIMING_FLOOR_S / duration
            basis = f"the timing floor: {TIMING_FLOOR_S * 1e3:g} ms of a {duration:.3g} s flow"
        now, then = conditions(new[-1]), conditions(saved[-1])
        changed = {name: (then[name], now[name]) for name in now if now[name] != then[name]}
        moved = abs(after / base - 1) > tolerance
        return Judgement(
            key, "moved" if moved else "held", after, base, len(before), tolerance, changed=changed, basis=basis
        )


def load_baseline(path):
    """The Baseline saved at path; ValueError naming the problem (missing, empty, corrupt, another schema)."""
    if not Path(path).is_file():
        raise ValueError(f"baseline {path} does not exist: save one first (--tcpnet-baseline-mode=save)")
    rows = read_rows([path])
    if not rows:
        raise ValueError(f"baseline {path} holds no flows: save one first (--tcpnet-baseline-mode=save)")
    # read_rows refused any row of a schema this version cannot read (schema 1's flows read as 2's: 2 added rows).
    return Baseline(rows, path=str(path))


def baseline_table(judgements):
    """The regression table: test, kernel, before (runs), after, change, tolerance, verdict, changed conditions."""
    header = ["test", "kernel", "before", "runs", "after", "change", "tolerance", "verdict", "conditions changed"]
    body = []
    for j in sorted(judgements, key=lambda j: (j.verdict != "moved", str(j.key))):
        body.append(
            [
                short_test(j.key[0]) + (f" #{j.key[1]}" if j.key[1] else ""),
                j.key[2] or MISSING,
                rate_cell(j.before_bps),
                j.runs or MISSING,
                rate_cell(j.after_bps),
                f"{j.change:+.1%}" if j.change is not None else MISSING,
                f"±{j.tolerance:.1%}" if j.tolerance is not None else MISSING,
                j.verdict if j.verdict != "not judged" else f"not judged: {j.reason}",
                ", ".join(f"{n} {_show(b)} -> {_show(a)}" for n, (b, a) in j.changed.items()) or MISSING,
            ]
        )
    return format_table(header, body)


def _show(value):
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in sorted(value.items())) or "{}"
    return "auto" if value is None else str(value)
