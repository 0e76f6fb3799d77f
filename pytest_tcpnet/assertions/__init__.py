"""Assertion helpers: compare a measurement with a model or an expectation, explain a failure with numbers.

One module per kind of check (throughput, window, events, verdicts over trials).
"""

from .events import (
    assert_loss_signature,
    assert_no_retransmissions,
    assert_no_window_full,
    assert_window_full,
    assert_zero_window,
)
from .latency import assert_request_latency
from .schedule import assert_follows_schedule
from .shares import assert_fair, assert_share_within
from .throughput import assert_limited_by, assert_throughput_within
from .verdicts import assert_faster, assert_intervals_within, confirm_failure
from .window import assert_receive_window_within

__all__ = [
    "assert_throughput_within",
    "assert_limited_by",
    "assert_faster",
    "assert_intervals_within",
    "assert_receive_window_within",
    "confirm_failure",
    "assert_no_window_full",
    "assert_window_full",
    "assert_zero_window",
    "assert_no_retransmissions",
    "assert_loss_signature",
    "assert_follows_schedule",
    "assert_request_latency",
    "assert_share_within",
    "assert_fair",
]
