"""The 2024 case (source 002): a kernel upgrade changed the window of applications that set SO_RCVBUF.

Source: Netflix's Kafka consumers set SO_RCVBUF; after an upgrade past Linux 6.6, whose
dfa2f0483360 replaced tcp_adv_win_scale with a measured scaling_ratio, their cross-region
transfers took twice as long and requests that used to finish within 30 s timed out: the window
had halved. 697a6c8cec03 (6.10) raised scaling_ratio's first guess back to about half the buffer.

Here a consumer with SO_RCVBUF 64 KB downloads over a 100 ms cross-region path under whatever
kernel the session runs on; each kernel's figure is judged against what the model says that
kernel's rule gives. Run under every installed kernel at once (README command 1 does):
``pytest --tcpnet-vm --tcpnet-kernel=all -m needs_netem examples/test_kernel_window_rule.py``.
"""

import pytest

from pytest_tcpnet import Link, assert_throughput_within, model
from pytest_tcpnet.model import KernelVersion

pytestmark = [pytest.mark.tcpnet_needs("netem"), pytest.mark.kernel_comparison]

RCVBUF = 65536
RTT = "100ms"
NBYTES = 2_000_000


def test_a_consumer_that_sets_so_rcvbuf_gets_the_window_its_kernel_s_rule_gives(tcpnet):
    """Measures a 2 MB download into SO_RCVBUF 64 KB over 100 ms; asserts the model names this kernel's rule and
    bounds the flow by the receive window, the largest window the consumer offered is the model's within 6%, and
    the goodput is the model's within 15% (window / RTT, slow start included)."""
    pair = tcpnet.pair(link=Link(rtt=RTT))
    result = pair.transfer(NBYTES, rcvbuf=RCVBUF)
    kernel = KernelVersion.parse(result.kernel)
    prediction = model.expected_throughput(result)
    assert prediction.bound == "rwnd" and kernel.window_rule in prediction.why, prediction
    predicted_window = model.advertised_window(RCVBUF, kernel=kernel, sysctls=result.sysctls["client"])
    offered = max(value for _, value in result.series("snd_wnd", "sender"))
    assert offered == pytest.approx(predicted_window, rel=0.06), (offered, predicted_window, kernel.window_rule)
    assert_throughput_within(result, rel=0.15)
