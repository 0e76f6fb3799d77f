"""What a workload measured, with the conditions it ran under (kernel, sysctls, link, buffers).

transfer: one flow (TransferResult, Phase); kinds: every other result kind and the ones the reports show; shares: a
flow's share of a bottleneck it crossed beside others.
"""

from .conditions import Phase
from .kinds import (
    REGISTERED_KINDS,
    ConcurrentResult,
    LatencyResult,
    RequestsResult,
    UdpResult,
    WindowProbe,
    WorkloadRun,
    host_contentions,
    jain_index,
    stolen_from,
    transfer_of,
    with_take,
)
from .shares import with_shares
from .transfer import TransferResult, VoidTake

__all__ = [
    "WorkloadRun",
    "with_take",
    "REGISTERED_KINDS",
    "TransferResult",
    "VoidTake",
    "ConcurrentResult",
    "LatencyResult",
    "RequestsResult",
    "UdpResult",
    "WindowProbe",
    "Phase",
    "jain_index",
    "with_shares",
    "transfer_of",
    "host_contentions",
    "stolen_from",
]
