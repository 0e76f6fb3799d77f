"""Workloads: one adapter per kind of traffic behind one small contract (base.Workload).

bulk (our own sender/receiver), iperf3, http (+ curl), and a fake for tests; processes run
inside the pair's namespaces and are stopped by pid.
"""

from .base import FlowOutcome, Workload
from .bulk import Bulk
from .process import NamespaceProcesses, nsenter_path

__all__ = ["Workload", "FlowOutcome", "Bulk", "NamespaceProcesses", "nsenter_path"]
