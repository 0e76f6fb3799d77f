"""Receive-window checks: the window a receiver advertised against a kernel rule."""

from ..model import KernelVersion, format_size

__all__ = ["assert_receive_window_within"]


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
        why = (
            f"kernel {probe.kernel} (>= 6.6) sizes the window from a measured scaling_ratio "
            f"(payload / truesize of received skbs), not from tcp_adv_win_scale "
            f"({'absent' if adv_win_scale is None else f'= {adv_win_scale}, ignored since 6.6'}): the window is "
            f"{measured / effective:.0%} of the {format_size(effective)} buffer, not the 50% a "
            f"tcp_adv_win_scale = 1 kernel gives"
        )
    else:
        why = (
            f"kernel {probe.kernel} (< 6.6) reserves buffer/2^tcp_adv_win_scale for overhead "
            f"(tcp_adv_win_scale = {adv_win_scale}): the window is {measured / effective:.0%} of the "
            f"{format_size(effective)} buffer"
        )
    raise AssertionError(
        f"advertised window {measured} B is {ratio:.0%} of the expected {expected_bytes:.0f} B "
        f"(allowed {1 - rel:.0%}..{1 + rel:.0%})\n"
        f"SO_RCVBUF requested {probe.rcvbuf_requested} B -> {effective} B effective (the kernel doubles it)\n"
        f"why: {why}"
    )
