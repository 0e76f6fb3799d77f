"""`python -m pytest_tcpnet.cleanup`: remove what killed pytest-tcpnet processes provably left behind.

Only namespaces and processes recorded in the ownership records (see netlink/ownership.py)
whose owner is dead are removed; look-alikes (`ip netns add tcpnet-mine`) are never touched.
Every Lab() does the same on start, so running this by hand is only needed when no further
test run is planned.
"""

import sys

from . import netlink


def main():
    """Sweep and say what was removed; exit 1 without the privilege to do it."""
    if not netlink.has_net_admin():
        print("pytest-tcpnet cleanup: needs CAP_NET_ADMIN and CAP_SYS_ADMIN (run as root)", file=sys.stderr)
        return 1
    removed = netlink.sweep_stale_namespaces()
    print(
        f"pytest-tcpnet cleanup: removed {len(removed)} namespace(s) of dead owners"
        + (": " + " ".join(removed) if removed else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
