"""Workloads: one adapter per kind of traffic behind one small contract (base.Workload).

bulk (our own sender/receiver), iperf3, http (+ curl), and a fake for tests; processes run
inside the pair's namespaces and are stopped by pid.

The names below load on first use: the zygote imports `workload.flows` and `workload.spawn`, which
must not pull in the adapters (and through them pyroute2).
"""

import importlib

__all__ = ["Workload", "FlowOutcome", "Bulk", "NamespaceProcesses", "nsenter_path"]

_HOMES = {
    "Workload": "base",
    "FlowOutcome": "base",
    "Bulk": "bulk",
    "NamespaceProcesses": "process",
    "nsenter_path": "process",
}


def __getattr__(name):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
