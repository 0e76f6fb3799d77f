"""The only layer that talks netlink (pyroute2): namespaces, veth, addresses, routes, qdiscs, sysctls."""

from .namespaces import (
                         NETNS_DIR,
                         PREFIX,
                         create_namespace,
                         create_namespaces,
                         lab_namespaces,
                         namespace_path,
                         owner_tag,
                         pids_in_namespace,
                         read_host_sysctls,
                         read_sysctls,
                         remove_namespace,
                         remove_namespaces,
                         run_in_namespace,
                         run_in_namespaces,
                         submit_in_namespace,
                         sweep_stale_namespaces,
                         sysctl_exists,
                         write_sysctls,
)
from .ownership import STATE_DIR, namespace_records, recorded_state
from .probe import available_congestion_controls, has_net_admin, kernel_release, qdisc_supported
from .qdisc import (
                         change_egress,
                         htb_burst_bytes,
                         prepare_change,
                         qdisc_stats,
                         qdisc_stats_of,
                         read_back_egress,
                         shape_egress,
                         shape_egress_classes,
                         timed_change,
                         u32_keys,
)
from .session import NamespaceSession, session_for, translate_errors
from .state import network_state
from .topology import OFFLOAD_FEATURES, TSO_FEATURES, Veth, get_offloads, interface_counters, set_offloads, wire

__all__ = [
    "NETNS_DIR", "PREFIX", "create_namespace", "create_namespaces", "lab_namespaces", "namespace_path", "owner_tag",
    "pids_in_namespace", "read_host_sysctls", "read_sysctls", "remove_namespace", "remove_namespaces", "run_in_namespace", "sweep_stale_namespaces",
    "sysctl_exists", "write_sysctls", "available_congestion_controls", "has_net_admin", "kernel_release",
    "qdisc_supported", "change_egress", "prepare_change", "read_back_egress", "timed_change", "htb_burst_bytes", "qdisc_stats", "qdisc_stats_of", "shape_egress", "shape_egress_classes", "u32_keys", "OFFLOAD_FEATURES", "TSO_FEATURES", "Veth",
    "interface_counters", "get_offloads", "set_offloads", "wire",
    "network_state",
    "run_in_namespaces", "submit_in_namespace", "NamespaceSession", "session_for", "translate_errors", "STATE_DIR", "namespace_records", "recorded_state",
]
