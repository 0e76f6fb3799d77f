"""pytest-tcpnet: TCP performance claims as reproducible property tests in network namespaces."""

from . import model
from .assertions import (
    assert_fair,
    assert_faster,
    assert_follows_schedule,
    assert_intervals_within,
    assert_limited_by,
    assert_loss_signature,
    assert_no_retransmissions,
    assert_no_window_full,
    assert_receive_window_within,
    assert_request_latency,
    assert_share_within,
    assert_throughput_within,
    assert_window_full,
    assert_zero_window,
)
from .errors import LabError, MissingCapability, TcpnetError
from .model import GilbertElliott, Host, Link, NetemCorrelationWarning, Slot
from .model.app import Cbr, Flow, Pace, Pause
from .model.schedule import Schedule

__all__ = [
    "Host",
    "Link",
    "GilbertElliott",
    "NetemCorrelationWarning",
    "Slot",
    "Schedule",
    "Flow",
    "Cbr",
    "Pace",
    "Pause",
    "model",
    "assert_throughput_within",
    "assert_follows_schedule",
    "assert_request_latency",
    "assert_share_within",
    "assert_fair",
    "assert_receive_window_within",
    "assert_limited_by",
    "assert_faster",
    "assert_intervals_within",
    "Lab",
    "Pair",
    "TransferResult",
    "ConcurrentResult",
    "Workload",
    "FlowOutcome",
    "WorkloadRun",
    "LabError",
    "MissingCapability",
    "TcpnetError",
    "Capture",
    "CaptureResult",
    "assert_no_window_full",
    "assert_window_full",
    "assert_zero_window",
    "assert_no_retransmissions",
    "assert_loss_signature",
]


def __getattr__(name):
    # The lab pulls in pyroute2; import it only when used, so `import pytest_tcpnet` stays cheap.
    if name in ("Lab", "Pair"):
        from . import lab

        return getattr(lab, name)
    if name in ("Capture", "CaptureResult"):
        from . import capture

        return getattr(capture, name)
    if name in ("TransferResult", "ConcurrentResult", "WorkloadRun"):
        from . import results

        return getattr(results, name)
    if name in ("Workload", "FlowOutcome"):
        from .workload import base

        return getattr(base, name)
    raise AttributeError(f"module 'pytest_tcpnet' has no attribute {name!r}")
