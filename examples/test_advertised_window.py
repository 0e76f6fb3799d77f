"""C8: the receive window a buffer buys depends on the kernel: half of it before 6.6, a learned share after.

Source figure: with tcp_adv_win_scale = 1 the advertised window is rmem / 2 (so C7 sized the
buffer at 2 x BDP). Linux 6.6 replaced tcp_adv_win_scale with a measured scaling_ratio
(payload / truesize of received skbs): the same SO_RCVBUF then gives ~0.61 of the doubled
buffer on a 1500-MTU veth, not 0.5. The model knows both; the old rule, encoded as a test,
passes on the VM's 6.1 and fails with the reason on the host's 6.18. CI runs this file on
both kernels (`-m kernel_comparison` in the VM).
"""

import os

import pytest

from pytest_tcpnet import assert_receive_window_within, model
from pytest_tcpnet.model import KernelVersion

pytestmark = [pytest.mark.tcpnet_needs("privilege"), pytest.mark.kernel_comparison]

REQUEST = 65536
NEW_KERNEL = KernelVersion.parse(os.uname().release).uses_scaling_ratio
# ±10% (the acceptance bound). Measured: 6.1 gives 64240 B every run (the model: 64240, exact);
# 6.18 gave 77836-81500 B over runs (the model: 79640, -2.3% .. +2.3%).
# For 16 KB the window starts at 10 segments (14480 B) and grows to the clamp only when a segment arrives to a
# receive queue holding nothing else (tcp_grow_window wants free space above twice rcv_ssthresh: with 32 KB of
# buffer, one skb): in a one-CPU User-Mode Linux guest the reader sometimes never catches up, so 6.1 reads 16060 B
# (exact) or 14480 B (0.9016), nothing between (3 of 8 fresh-clone CI runs, 3 of 8 probes quiet), and 6.12 18.8 KB
# or 0.9231 of it. Both values pass: the outcome is decided by whole segments, not by noise.
REL = 0.10


@pytest.mark.parametrize("request_bytes", [16384, REQUEST, 262144])
def test_the_model_predicts_the_window_on_this_kernel(tcpnet, request_bytes):
    """C8 (source: window = rmem / 2 with tcp_adv_win_scale 1): measures the largest window the receiver
    advertised (sender's TCP_INFO snd_wnd) for SO_RCVBUF = request; asserts it is within ±10% of
    model.advertised_window for the running kernel and its sysctls, on 6.1 and 6.18 alike."""
    probe = tcpnet.pair().measure_advertised_window(rcvbuf=request_bytes)
    predicted = model.advertised_window(request_bytes, kernel=probe.kernel, sysctls=probe.sysctls)
    assert probe.rcvbuf_effective == model.receive_space(request_bytes, sysctls=probe.sysctls)  # C12: doubled, capped
    assert_receive_window_within(probe, predicted, rel=REL)


@pytest.mark.xfail(
    NEW_KERNEL, reason="C8: 6.6+ uses scaling_ratio, not tcp_adv_win_scale", strict=True, raises=AssertionError
)
def test_window_is_half_the_doubled_rcvbuf(tcpnet):
    """C8's rule as the source states it (window = half the doubled SO_RCVBUF): measures the window for
    SO_RCVBUF 64 KB; asserts it is 64 KB ±10%. Expected to fail (strict xfail) on kernels >= 6.6."""
    probe = tcpnet.pair().measure_advertised_window(rcvbuf=REQUEST)
    assert probe.rcvbuf_effective == 2 * REQUEST  # C12: the kernel doubles the request
    expected = model.advertised_window_adv_win_scale(probe.rcvbuf_effective, 1)  # = REQUEST
    assert_receive_window_within(probe, expected, rel=REL)


def test_the_failure_names_the_kernel_rule(tcpnet):
    """C8's failure report: measures the window for SO_RCVBUF 64 KB and checks it against the old rule;
    asserts that on 6.6+ the failure names scaling_ratio, the kernel, the window and the doubling."""
    probe = tcpnet.pair().measure_advertised_window(rcvbuf=REQUEST)
    assert probe.kernel == os.uname().release
    try:
        assert_receive_window_within(probe, REQUEST, rel=REL)
    except AssertionError as exc:
        message = str(exc)
    else:
        assert not NEW_KERNEL, f"6.6+ kernel gave the old window: {probe}"
        return
    assert NEW_KERNEL, message
    for words in ("scaling_ratio", ">= 6.6", probe.kernel, str(probe.window_bytes), "doubles"):
        assert words in message, message
