"""Pure model layer: units, value types with validation, TCP formulas. Stdlib only, no root."""

from .kernel import KernelVersion
from .predict import (
                      LOSS_BASED_CCS,
                      PAYLOAD_PER_FRAME,
                      PAYLOAD_PER_FRAME_IPV6,
                      Conditions,
                      Prediction,
                      expected_throughput,
                      link_goodput,
                      loss_bound,
)
from .schedule import Schedule
from .specs import (
                      DISTRIBUTIONS,
                      HOST_GLOBAL_SYSCTLS,
                      KNOWN_CONGESTION_CONTROLS,
                      MTU_FRAME_BYTES,
                      GilbertElliott,
                      Host,
                      Link,
                      OneWay,
                      Slot,
                      check_congestion_control,
                      distribution_table,
)
from .tcp import (
                      SOCK_MIN_RCVBUF,
                      SOCK_MIN_SNDBUF,
                      advertised_window_adv_win_scale,
                      bdp,
                      effective_socket_buffer,
                      mathis_throughput,
                      request_response_times,
                      transfer_time,
                      window_for_throughput,
                      window_limited_throughput,
                      window_limited_transfer_time,
)
from .units import format_rate, format_size, format_time, parse_fraction, parse_rate, parse_size, parse_time
from .window import INITIAL_SCALING_RATIO_6_6, LEARNED_SCALING_RATIO, advertised_window, receive_space, send_window

__all__ = [
    "KernelVersion", "Host", "Link", "Schedule", "OneWay", "DISTRIBUTIONS", "distribution_table", "GilbertElliott", "Slot", "HOST_GLOBAL_SYSCTLS", "KNOWN_CONGESTION_CONTROLS",
    "MTU_FRAME_BYTES", "check_congestion_control", "advertised_window_adv_win_scale", "bdp",
    "effective_socket_buffer", "mathis_throughput", "transfer_time", "window_for_throughput",
    "window_limited_throughput", "format_rate", "format_size", "format_time", "parse_fraction",
    "parse_rate", "parse_size", "parse_time", "SOCK_MIN_RCVBUF", "SOCK_MIN_SNDBUF",
    "Conditions", "Prediction", "expected_throughput", "link_goodput", "loss_bound", "LOSS_BASED_CCS",
    "PAYLOAD_PER_FRAME", "PAYLOAD_PER_FRAME_IPV6", "window_limited_transfer_time", "request_response_times", "LEARNED_SCALING_RATIO", "INITIAL_SCALING_RATIO_6_6", "advertised_window", "receive_space", "send_window",
]
