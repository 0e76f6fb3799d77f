"""Merge results files (CI shards, kernels, runs) into one comparison: a flow per line, a column group per kernel."""

import statistics
from dataclasses import dataclass

from .table import MISSING, buffers_cell, count_cell, format_table, link_cell, rate_cell, ratio_cell, short_test

GROUP_BY = ("kernel", "source", "host", "label")


@dataclass(frozen=True)
class Comparison:
    """Flows (one per condition) against groups (kernels, files, hosts); cells hold every row measured there."""

    by: str
    groups: list
    flows: list  # [(key, description dict)]
    cells: dict  # {(key, group): [rows]}

    def rows_at(self, key, group):
        return self.cells.get((key, group), [])


def flow_key(row):
    """What makes two rows the same flow on different kernels: the test, its n-th flow and the requested conditions.

    Only what the test asked for counts: effective values (buffers, the default cc) are what
    differs between kernels, so they are shown per group instead.
    """
    buffers = row.get("buffers") or {}
    link = row.get("link") or {}
    hosts = tuple(tuple(sorted(((row.get(role) or {}).get("sysctls") or {}).items())) for role in ("client", "server"))
    return (
        row.get("test"),
        row.get("flow", 0),
        row.get("direction"),
        link.get("describe"),
        buffers.get("sndbuf_requested"),
        buffers.get("rcvbuf_requested"),
        hosts,
    )


def group_of(row, by):
    if by in ("host", "label"):
        return (row.get("run") or {}).get(by) or MISSING
    return row.get(by) or MISSING


def compare(rows, *, by="kernel"):
    """Group rows by flow (sorted by test) and by `by` (kernel, source file, host or run label, first-seen order)."""
    if by not in GROUP_BY:
        raise ValueError(f"by: must be one of {', '.join(GROUP_BY)}, got {by!r}")
    groups, flows, cells = [], {}, {}
    for row in rows:
        group, key = group_of(row, by), flow_key(row)
        if group not in groups:
            groups.append(group)
        flows.setdefault(key, row)
        cells.setdefault((key, group), []).append(row)
    ordered = sorted(flows.items(), key=lambda item: (str(item[0][0]), item[0][1]))  # by test, then flow number
    return Comparison(by=by, groups=groups, flows=ordered, cells=cells)


def median_of(rows, field):
    values = [r[field] for r in rows if isinstance(r.get(field), (int, float))]
    return statistics.median(values) if values else None


def comparison_table(comparison, *, markdown=False):
    """The merged table: requested conditions once, then per group cc / measured / expected / ratio / limited by /
    win-full / retrans.

    Several rows in one cell (repeated runs) show the median and their count; with two or more
    groups a last column per later group gives its measured throughput over the first group's.
    """
    header = ["test", "link", "buffers"]
    for group in comparison.groups:
        header += [f"{group}: cc", "measured", "expected", "ratio", "limited by", "win-full", "retrans"]
    first = comparison.groups[0] if comparison.groups else None
    for group in comparison.groups[1:]:
        header.append(f"{group} / {first}")
    body = []
    for key, row in comparison.flows:
        buffers = row.get("buffers") or {}
        requested = {k: v for k, v in buffers.items() if k.endswith("_requested")}
        line = [
            short_test(row.get("test")) + (f" #{row['flow']}" if row.get("flow") else ""),
            link_cell(row.get("link")),
            buffers_cell(requested),
        ]
        for group in comparison.groups:
            at = comparison.rows_at(key, group)
            if not at:
                line += [MISSING] * 7
                continue
            measured = rate_cell(median_of(at, "measured_bps")) + (f" (n={len(at)})" if len(at) > 1 else "")
            bound = at[-1].get("bound")
            limited = sorted({r.get("limited_by") for r in at if r.get("limited_by")})
            line += [
                "/".join(sorted({r.get("cc") or MISSING for r in at})),
                measured,
                rate_cell(median_of(at, "expected_bps")) + (f" ({bound})" if bound else ""),
                ratio_cell(median_of(at, "ratio")),
                "/".join(limited) or MISSING,
                count_cell(_median_count(at, "window_full")),
                count_cell(_median_count(at, "retransmissions")),
            ]
        base = median_of(comparison.rows_at(key, first), "measured_bps") if first is not None else None
        for group in comparison.groups[1:]:
            other = median_of(comparison.rows_at(key, group), "measured_bps")
            line.append(ratio_cell(other / base) if other and base else MISSING)
        body.append(line)
    return format_table(header, body, markdown=markdown)


def flow_labels(comparison):
    """One short label per flow of a comparison (test #n, link, requested buffers) for plots."""
    labels = []
    for _, row in comparison.flows:
        buffers = {k: v for k, v in (row.get("buffers") or {}).items() if k.endswith("_requested")}
        test = short_test(row.get("test")).partition("::")[2] or short_test(row.get("test"))
        labels.append(f"{test} #{row.get('flow', 0)}\n{link_cell(row.get('link'))}, {buffers_cell(buffers)}")
    return labels


def _median_count(rows, field):
    value = median_of(rows, field)
    return None if value is None else round(value)
