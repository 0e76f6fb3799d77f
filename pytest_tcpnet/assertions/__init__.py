"""Assertion helpers: compare a measurement with a model or an expectation, explain a failure with numbers.

One module per kind of check (throughput, window, events, verdicts over trials); all of them
build their failure message with ``_format``.
"""

from .events import (assert_loss_signature, assert_no_retransmissions, assert_no_window_full, assert_window_full,
                     assert_zero_window)
from .throughput import assert_throughput_within
from .window import assert_receive_window_within

__all__ = ["assert_throughput_within", "assert_receive_window_within", "assert_no_window_full", "assert_window_full",
           "assert_zero_window", "assert_no_retransmissions", "assert_loss_signature"]
