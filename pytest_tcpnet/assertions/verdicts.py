"""Verdicts over repeated, noisy measurements: decide as soon as the evidence is clear, report every trial.

A single throughput figure on a shared, software-emulated machine varies widely between runs
(docs/model.md, "Verdicts that do not flake"); one trial per claim makes a test flaky, a
tolerance wide enough to hide that makes it useless. These helpers repeat a measurement only
while the verdict is unclear, up to a bound, and put every trial in the failure message.
"""

import math
import statistics

from ..model import format_rate

__all__ = [
    "assert_faster",
    "judge_trials",
    "confirm_failure",
    "assert_intervals_within",
    "steady_state_series",
    "Trial",
]

# Two-sided 95% Student t quantiles by degrees of freedom (df 1..10; then ~normal).
_T95 = {1: 12.71, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def _t95(df):
    return _T95.get(df, 2.0 if df > 30 else 2.1)


class Trial:
    """One round of a comparison: both results, in the order they ran."""

    def __init__(self, index, a, b, a_first):
        self.index, self.a, self.b, self.a_first = index, a, b, a_first

    @property
    def ratio(self):
        """a's throughput over b's."""
        return self.a.throughput_bps / self.b.throughput_bps


def _throughput_of(result, who):
    value = getattr(result, "throughput_bps", None)
    if not isinstance(value, (int, float)) or not value > 0:
        raise TypeError(f"{who}: must return a result with throughput_bps > 0, got {result!r}")
    return value


def assert_faster(run_a, run_b, *, factor=1.0, min_trials=2, max_trials=6, label_a="a", label_b="b"):
    """Assert run_a() is at least factor times as fast as run_b(), over interleaved trials, stopping once clear.

    Each round runs both callables (alternating which goes first, so drift hits both alike)
    and takes log(a/b). After min_trials rounds, the claim passes when the 95% confidence
    interval of the mean log-ratio lies above log(factor), fails when it lies below, and
    otherwise runs another round; at max_trials the geometric-mean ratio decides. Returns
    the trials. The message lists every trial.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not ours
    if not (isinstance(factor, (int, float)) and factor > 0):
        raise ValueError(f"factor: must be a number > 0, got {factor!r}")
    if not (isinstance(min_trials, int) and isinstance(max_trials, int) and 2 <= min_trials <= max_trials <= 50):
        raise ValueError(
            f"min_trials/max_trials: need 2 <= min_trials <= max_trials <= 50, got {min_trials}, {max_trials}"
        )
    for name, fn in (("run_a", run_a), ("run_b", run_b)):
        if not callable(fn):
            raise TypeError(
                f"{name}: must be a callable returning a result (e.g. lambda: pair.transfer(...)), got {fn!r}"
            )
    trials, verdict = [], None
    while len(trials) < max_trials:
        a_first = len(trials) % 2 == 0
        if a_first:
            a = run_a()
            b = run_b()
        else:
            b = run_b()
            a = run_a()
        _throughput_of(a, "run_a")
        _throughput_of(b, "run_b")
        trials.append(Trial(len(trials) + 1, a, b, a_first))
        if len(trials) >= min_trials:
            low, mean, high = _log_interval([math.log(t.ratio) for t in trials])
            if low >= math.log(factor):
                verdict = "pass"
                break
            if high < math.log(factor):
                verdict = "fail"
                break
    if verdict is None:
        mean = statistics.fmean(math.log(t.ratio) for t in trials)
        verdict = "pass" if mean >= math.log(factor) else "fail"
    geo = math.exp(statistics.fmean(math.log(t.ratio) for t in trials))
    if verdict == "pass":
        return trials
    lines = [
        f"{label_a} is {geo:.3g}x {label_b} (geometric mean of {len(trials)} interleaved trials), "
        f"expected at least {factor:g}x",
        f"  {'trial':>5}  {'order':<7} {label_a:>14}  {label_b:>14}  {'ratio':>7}",
    ]
    for t in trials:
        order = f"{label_a},{label_b}" if t.a_first else f"{label_b},{label_a}"
        lines.append(
            f"  {t.index:>5}  {order:<7} {format_rate(t.a.throughput_bps):>14}  "
            f"{format_rate(t.b.throughput_bps):>14}  {t.ratio:>6.3g}x"
        )
    low, _, high = _log_interval([math.log(t.ratio) for t in trials]) if len(trials) > 1 else (0, 0, 0)
    if len(trials) > 1:
        lines.append(f"  95% interval of the ratio: {math.exp(low):.3g}x .. {math.exp(high):.3g}x")
    lines.append(f"{label_a} conditions:\n    " + _describe(trials[-1].a).replace("\n", "\n    "))
    lines.append(f"{label_b} conditions:\n    " + _describe(trials[-1].b).replace("\n", "\n    "))
    raise AssertionError("\n".join(lines))


def _describe(result):
    describe = getattr(result, "describe", None)
    return describe() if callable(describe) else repr(result)


def _log_interval(logs):
    """(low, mean, high): the 95% t-interval of the mean of logs."""
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return -math.inf, mean, math.inf
    half = _t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return mean - half, mean, mean + half


def judge_trials(measure, within, *, trials):
    """Run measure() up to `trials` times (odd), stop once a majority agrees; return (passed, results, verdicts).

    within(result) -> bool judges one trial; the claim holds when most trials hold, and the
    run stops as soon as either side has a majority, so a clear case costs (trials+1)/2 runs.
    """
    if not (isinstance(trials, int) and trials >= 1 and trials % 2 == 1):
        raise ValueError(f"trials: must be an odd number >= 1 (a majority decides), got {trials!r}")
    majority = trials // 2 + 1
    results, verdicts = [], []
    while verdicts.count(True) < majority and verdicts.count(False) < majority:
        result = measure()
        results.append(result)
        verdicts.append(bool(within(result)))
    return verdicts.count(True) >= majority, results, verdicts


def steady_state_series(result, *, interval=0.1, rtt_s=None, target_bps=None):
    """(rate series after slow start, intervals skipped): slow start ends ~log2(target window / 10 MSS) RTTs in.

    Uses result.rate_series(interval); drops the last interval (a partial one).
    """
    rate_series = getattr(result, "rate_series", None)
    if not callable(rate_series):
        raise TypeError("result has no rate_series(interval): steady-state checks need the workload's rate samples")
    series = list(rate_series(interval))[:-1]
    skip_s = 0.0
    if rtt_s and target_bps:
        window_segments = max(1.0, target_bps * rtt_s / 8 / 1448)
        skip_s = rtt_s * (math.ceil(math.log2(max(1.0, window_segments / 10))) + 2)
    steady = [(t, bps) for t, bps in series if t >= skip_s]
    return steady, len(series) - len(steady)


def assert_intervals_within(result, expected_bps, *, rel, k=None, n=None, interval=0.1, rtt_s=None):
    """Assert at least k of the n steady-state rate intervals are within ±rel of expected_bps (default: 80%).

    Steady state starts after the model's slow-start time (steady_state_series); n defaults
    to every steady interval. The message lists every interval.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not ours
    if not 0 < rel < 1:
        raise ValueError(f"rel: must be in (0, 1), got {rel!r}")
    if rtt_s is None:
        rtt_s = getattr(result, "min_rtt_s", None) or getattr(getattr(result, "link", None), "rtt_s", 0)
    steady, skipped = steady_state_series(result, interval=interval, rtt_s=rtt_s, target_bps=expected_bps)
    if n is not None:
        steady = steady[:n]
    if not steady:
        raise AssertionError(
            f"no steady-state {interval:g} s interval after slow start ({skipped} skipped): transfer more bytes"
        )
    needed = math.ceil(0.8 * len(steady)) if k is None else k
    inside = [abs(bps / expected_bps - 1) <= rel for _, bps in steady]
    if sum(inside) >= needed:
        return steady
    rows = "\n".join(
        f"  {t:7.2f} s  {format_rate(bps):>14}  {bps / expected_bps:6.1%}  {'ok' if ok else 'OUT'}"
        for (t, bps), ok in zip(steady, inside)
    )
    raise AssertionError(
        f"{sum(inside)} of {len(steady)} steady-state intervals within ±{rel:.0%} of {format_rate(expected_bps)}, "
        f"needed {needed} ({skipped} slow-start intervals skipped)\n{rows}\n{_describe(result)}"
    )


def confirm_failure(measure, check, *, attempts=2):
    """Measure, check; on an AssertionError measure again (up to attempts in all) and fail only if every attempt fails.

    For sweeps: hypothesis shrinks toward the failing example it saw, so an example that
    failed once by noise would mislead it; confirmed, the minimal example it reports fails
    for real. Returns the passing result; the error lists every attempt.
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not ours
    if not (isinstance(attempts, int) and attempts >= 1):
        raise ValueError(f"attempts: must be an int >= 1, got {attempts!r}")
    failures = []
    for _ in range(attempts):
        result = measure()
        try:
            check(result)
        except AssertionError as exc:
            failures.append(exc)
            continue
        return result
    raise AssertionError(
        f"failed in all {attempts} measurements of this example:\n"
        + "\n".join(f"--- attempt {i}:\n{exc}" for i, exc in enumerate(failures, 1))
    )
