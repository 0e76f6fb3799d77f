"""Assertion helpers: compare a measurement with a model, explain a failure with numbers."""

from .model import KernelVersion, format_rate, format_size

__all__ = ["assert_throughput_within", "assert_receive_window_within"]


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


def assert_receive_window_within(probe, expected_bytes, *, rel):
    """Assert a WindowProbe (Pair.measure_advertised_window) is within ±rel of expected_bytes, explaining kernels."""
    if not 0 < rel < 1:
        raise ValueError(f"rel: must be in (0, 1), got {rel!r}")
    measured = probe.window_bytes
    ratio = measured / expected_bytes
    if abs(ratio - 1) <= rel:
        return
    kernel = KernelVersion.parse(probe.kernel)
    effective = probe.rcvbuf_effective
    adv_win_scale = probe.sysctls.get("net.ipv4.tcp_adv_win_scale")
    if kernel.uses_scaling_ratio:
        why = (f"kernel {probe.kernel} (>= 6.6) sizes the window from a measured scaling_ratio "
               f"(payload / truesize of received skbs), not from tcp_adv_win_scale "
               f"({'absent' if adv_win_scale is None else f'= {adv_win_scale}, ignored since 6.6'}): the window is "
               f"{measured / effective:.0%} of the {format_size(effective)} buffer, not the 50% a "
               f"tcp_adv_win_scale = 1 kernel gives")
    else:
        why = (f"kernel {probe.kernel} (< 6.6) reserves buffer/2^tcp_adv_win_scale for overhead "
               f"(tcp_adv_win_scale = {adv_win_scale}): the window is {measured / effective:.0%} of the "
               f"{format_size(effective)} buffer")
    raise AssertionError(
        f"advertised window {measured} B is {ratio:.0%} of the expected {expected_bytes:.0f} B "
        f"(allowed {1 - rel:.0%}..{1 + rel:.0%})\n"
        f"SO_RCVBUF requested {probe.rcvbuf_requested} B -> {effective} B effective (the kernel doubles it)\n"
        f"why: {why}")
