"""Whether this process may build labs: stdlib only, so asking costs nothing (no pyroute2)."""

__all__ = ["has_net_admin"]

_CAP_NET_ADMIN = 12
_CAP_SYS_ADMIN = 21


def has_net_admin():
    """True if this process holds CAP_NET_ADMIN and CAP_SYS_ADMIN (namespaces need both)."""
    try:
        with open("/proc/self/status") as f:
            caps = next(int(line.split()[1], 16) for line in f if line.startswith("CapEff:"))
    except (OSError, StopIteration, ValueError):
        return False
    return bool(caps & (1 << _CAP_NET_ADMIN)) and bool(caps & (1 << _CAP_SYS_ADMIN))
