"""Small statistics the verdicts need, stdlib only: Student's t quantile and a confidence interval of a mean."""

from __future__ import annotations

import math
import statistics

__all__ = ["t_quantile", "mean_interval", "trials_to_decide", "percentile"]


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (Lentz's method)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for numerator in (
            m * (b - m) * x / ((a + m2 - 1) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def _incomplete_beta(a: float, b: float, x: float) -> float:
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1 - x) / b


def _t_cdf(t: float, df: int) -> float:
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1 - tail if t >= 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with df degrees of freedom (bisection on its CDF)."""
    if not 0 < p < 1 or df < 1:
        raise ValueError(f"p/df: need 0 < p < 1 and df >= 1, got {p!r}, {df!r}")
    low, high = -1e3, 1e3
    for _ in range(200):
        middle = (low + high) / 2
        if _t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def mean_interval(values: list[float], confidence: float) -> tuple[float, float, float]:
    """(mean, low, high): the two-sided `confidence` interval of the mean of values (Student's t; >= 2 values)."""
    if len(values) < 2:
        raise ValueError(f"values: an interval needs at least 2, got {len(values)}")
    mean = statistics.fmean(values)
    half = t_quantile((1 + confidence) / 2, len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def trials_to_decide(values: list[float], confidence: float, low: float, high: float) -> int | None:
    """About how many values in all would put the interval of the mean on one side of the nearer bound of
    [low, high], if the mean and spread stay as they are (None: the mean sits on a bound)."""
    mean, spread = statistics.fmean(values), statistics.stdev(values)
    distance = min(abs(mean - low), abs(mean - high))
    if distance == 0:
        return None
    n = len(values)
    while n < 10_000:
        n += 1
        if t_quantile((1 + confidence) / 2, n - 1) * spread / math.sqrt(n) < distance:
            return n
    return None


def percentile(values, p: float) -> float:
    """The p-th percentile (0..100) of values, linearly interpolated (numpy's default)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no samples")
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
