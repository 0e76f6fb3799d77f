"""C1: a window-limited flow moves one receive window per round trip, so throughput = window / RTT.

Source figure: tcp_rmem = 4096 pinned, window 1040 B; 10 ms -> 108 KB/s, 40 ms -> 30 KB/s
(model 101.6 KB/s at 10 ms). Here as a hypothesis property over RTT 5-200 ms x SO_RCVBUF
4-256 KB in the window-limited region: every example's goodput is within tolerance of the
model, which knows the kernel's window for the buffer and the round trips slow start costs.
"""

import os

import pytest
from hypothesis import assume, given, note, settings

from pytest_tcpnet import assert_throughput_within, model, strategies
from pytest_tcpnet.assertions.verdicts import confirm_failure
from pytest_tcpnet.vm import software_emulated

#: Measured in the 6.1 VM on a grid (RTT 5, 20, 80, 200 ms x SO_RCVBUF 4, 32, 256 KB):
#: goodput / model 0.73-1.04 (0.84-1.04 from 20 ms up; at 5 ms the VM's stack adds 1-2 ms per
#: round trip, srtt 6.2-7.4 ms); goodput / (observed window / srtt) 0.83-1.08.
REL_MODEL = 0.35
REL_LAW = 0.25
#: Under software emulation a round trip shorter than this is not the path's: the guest's endpoints
#: add 1-2 ms to each (srtt 6.2-7.4 ms at 5 ms, quiet host) and 4-5 ms when the host is busy (srtt
#: 9.4-10.7 ms at 5 ms, goodput 0.60-0.63 of the model, in a CI run beside another test session).
#: There the law is still checked on the RTT the flow saw; the prediction from the path's RTT only
#: from this RTT up, where those milliseconds stay inside the tolerance.
EMULATED_MODEL_FLOOR_S = 0.02


@pytest.mark.tcpnet_needs("netem")
# Buffers from 8 KB: a 4 KB buffer gives a window of about two segments, which the 6.1 VM sustained
# as 1 segment in one run and 1.6 in another at 5 ms RTT (1.7 vs 3.8 Mbit/s, each confirmed by a
# second measurement): no model of a whole-segment window can call that, so the property covers
# windows of three or more segments; C1's own 4 KB point (tcp_rmem 4096 at 10 and 40 ms) is
# tests/test_netem.py::test_c1_window_over_rtt_law.
@settings(parent=strategies.sweep, max_examples=6)
@given(link=strategies.links(rtt=("5ms", "200ms")), rcvbuf=strategies.buffer_sizes("8kb", "256kb"))
def test_window_limited_throughput_is_window_over_rtt(tcpnet, link, rcvbuf):
    """C1 (source: 1040 B window, 10 ms -> 108 KB/s, 40 ms -> 30 KB/s): measures the goodput of a transfer
    with SO_RCVBUF = rcvbuf over an RTT from the sweep; asserts it is within ±25% of the window / RTT the
    flow itself saw (TCP_INFO) and within ±35% of the model's prediction from the conditions (the
    kernel's window for that buffer per RTT, slow start counted); under software emulation the latter
    from 20 ms up (see EMULATED_MODEL_FLOOR_S)."""
    kernel = os.uname().release
    window = model.advertised_window(rcvbuf, kernel=kernel, sysctls={"net.core.rmem_max": _rmem_max()})
    steady = model.window_limited_throughput(window, link.rtt_s)
    assume(steady < 50e6)  # the window-limited region: well below what the VM's stack can carry
    # ~1 s of transfer, but at least 6 windows (a window per round trip: 200 ms x 12 rounds = 2.4 s).
    nbytes = int(max(6 * window, min(2_000_000, steady / 8 * 1.0)))
    note(f"window {window} B, RTT {link.rtt_s * 1e3:.1f} ms, {nbytes} B")

    predict_from_path = not software_emulated() or link.rtt_s >= EMULATED_MODEL_FLOOR_S

    def check(result):
        assert model.expected_throughput(result).bound == "rwnd"
        # The law alone: the window and RTT this flow saw (TCP_INFO snd_wnd, srtt).
        assert_throughput_within(result, rel=REL_LAW, observed=True)
        if predict_from_path:
            # The model from the conditions: the kernel's window for the buffer, the path's RTT, slow start.
            assert_throughput_within(result, rel=REL_MODEL)

    with tcpnet.pair(link=link) as pair:
        # A failing example is measured once more before hypothesis sees it, so noise cannot steer shrinking.
        confirm_failure(lambda: pair.transfer(nbytes, rcvbuf=rcvbuf), check)


def _rmem_max():
    with open("/proc/sys/net/core/rmem_max") as f:
        return f.read().strip()
