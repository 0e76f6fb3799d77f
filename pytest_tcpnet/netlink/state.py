"""Read-only views of a namespace's network configuration (for the host guard)."""

from pyroute2 import IPRoute

from .namespaces import with_iproute

__all__ = ["network_state"]

_FAMILIES = (2, 10)  # AF_INET, AF_INET6


def _links(ipr):
    return sorted(
        (
            link.get_attr("IFLA_IFNAME"),
            link["index"],
            link.get_attr("IFLA_MTU"),
            link.get_attr("IFLA_ADDRESS"),
            link["flags"],
            link.get_attr("IFLA_MASTER"),
        )
        for link in ipr.get_links()
    )


def _addresses(ipr):
    return sorted(
        (a["family"], a["index"], a.get_attr("IFA_ADDRESS"), a["prefixlen"], a.get_attr("IFA_LABEL"))
        for a in ipr.get_addr()
    )


def _routes(ipr):
    # No table filter: the dump holds every table (main, local, and any policy-routing table).
    rows = []
    for family in _FAMILIES:
        for r in ipr.get_routes(family=family):
            rows.append(
                (
                    family,
                    r.get_attr("RTA_TABLE"),
                    r.get_attr("RTA_DST"),
                    r["dst_len"],
                    r.get_attr("RTA_GATEWAY"),
                    r.get_attr("RTA_OIF"),
                    r.get_attr("RTA_PRIORITY"),
                    r["type"],
                    r["proto"],
                    r["scope"],
                )
            )
    return sorted(rows, key=repr)


def _rules(ipr):
    rows = []
    for family in _FAMILIES:
        for rule in ipr.get_rules(family=family):
            rows.append(
                (
                    family,
                    rule.get_attr("FRA_PRIORITY"),
                    rule.get_attr("FRA_TABLE"),
                    rule["action"],
                    rule.get_attr("FRA_SRC"),
                    rule.get_attr("FRA_DST"),
                    rule.get_attr("FRA_FWMARK"),
                )
            )
    return sorted(rows, key=repr)


def _qdiscs(ipr):
    return sorted((q["index"], q.get_attr("TCA_KIND"), q["handle"], q["parent"]) for q in ipr.get_qdiscs())


def _read(ipr):
    return {
        "links": _links(ipr),
        "addresses": _addresses(ipr),
        "routes": _routes(ipr),
        "rules": _rules(ipr),
        "qdiscs": _qdiscs(ipr),
    }


def network_state(namespace=None):
    """{"links", "addresses", "routes", "rules", "qdiscs"}: sorted tuples (routes of all tables, v4 and v6).

    namespace=None reads the namespace the calling thread is in (the host, for the host guard).
    """
    if namespace is None:
        with IPRoute() as ipr:
            return _read(ipr)
    return with_iproute(namespace, _read)
