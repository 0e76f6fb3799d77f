"""Throughput checks: a measured goodput against an expected rate."""

from ..model import format_rate

__all__ = ["assert_throughput_within"]


def assert_throughput_within(result, expected_bps, *, rel):
    """Assert result.throughput_bps is within ±rel of expected_bps; the message shows both and the conditions."""
    if not 0 < rel < 1:
        raise ValueError(f"rel: must be in (0, 1), got {rel!r}")
    if not expected_bps > 0:
        raise ValueError(f"expected_bps: must be > 0, got {expected_bps!r}")
    measured = result.throughput_bps
    ratio = measured / expected_bps
    if abs(ratio - 1) <= rel:
        return
    raise AssertionError(
        f"throughput {format_rate(measured)} is {ratio:.1%} of the expected {format_rate(expected_bps)} "
        f"(allowed {1 - rel:.0%}..{1 + rel:.0%})\n{result.describe()}")
