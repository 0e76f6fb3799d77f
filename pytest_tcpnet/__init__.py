"""pytest-tcpnet: TCP performance claims as reproducible property tests in network namespaces."""

from . import model
from .assertions import assert_receive_window_within, assert_throughput_within
from .assertions import (assert_loss_signature, assert_no_retransmissions, assert_no_window_full, assert_window_full,
                         assert_zero_window)
from .errors import LabError, MissingCapability, TcpnetError
from .model import Host, Link

__all__ = ["Host", "Link", "model", "assert_throughput_within", "assert_receive_window_within", "Lab", "Pair", "TransferResult",
           "LabError", "MissingCapability", "TcpnetError", "Capture", "CaptureResult", "assert_no_window_full",
           "assert_window_full", "assert_zero_window", "assert_no_retransmissions", "assert_loss_signature"]


def __getattr__(name):
    # The lab pulls in pyroute2; import it only when used, so `import pytest_tcpnet` stays cheap.
    if name in ("Lab", "Pair"):
        from . import lab
        return getattr(lab, name)
    if name in ("Capture", "CaptureResult"):
        from . import capture
        return getattr(capture, name)
    if name == "TransferResult":
        from .results import TransferResult
        return TransferResult
    raise AttributeError(f"module 'pytest_tcpnet' has no attribute {name!r}")
