"""Text tables of flow rows (session summary) and the key figures CI dashboards read (JUnit properties)."""

from ..hostload import CONTENTION_WARNING_CORES, STEAL_WARNING_CPUS
from ..model import format_rate, format_size, format_time

MISSING = "-"

#: (header, cell function) of the session summary, in order.
SUMMARY_COLUMNS = (
    ("test", lambda r: short_test(r["test"]) + (f" #{r['flow']}" if r.get("flow") else "")),
    ("outcome", lambda r: r.get("outcome") or MISSING),
    ("link", lambda r: link_cell(r.get("link"))),
    ("buffers", lambda r: buffers_cell(r.get("buffers") or {})),
    ("cc", lambda r: r.get("cc") or MISSING),
    ("expected", lambda r: expected_cell(r)),
    ("measured", lambda r: measured_cell(r)),
    ("ratio", lambda r: ratio_cell(r.get("ratio"))),
    ("limited by", lambda r: r.get("limited_by") or MISSING),
    ("win-full", lambda r: count_cell(r.get("window_full"))),
    ("retrans", lambda r: count_cell(r.get("retransmissions"))),
)


def summary_table(rows):
    """The session summary: one line per measured flow, as a text table (a notes column where any row has one)."""
    columns = list(SUMMARY_COLUMNS)
    if any((r.get("attempt") or 1) > 1 for r in rows):  # a test ran again (retry, steal): say which run a row is
        columns.insert(2, ("attempt", lambda r: f"{r.get('attempt') or 1}{' void' if r.get('void_attempt') else ''}"))
    if any(notes_cell(r) for r in rows):
        columns.append(("notes", lambda r: notes_cell(r) or ""))
    return format_table([h for h, _ in columns], [[cell(r) for _, cell in columns] for r in rows])


def notes_cell(row):
    """What a row measured besides its main figure (a window probe's advertised window, a run's spread)."""
    window = row.get("advertised_window")
    notes = [f"advertised window {format_size(window)}"] if window else []
    if row.get("notes"):
        notes.append(row["notes"])
    busy = row.get("host_contention_cpus")
    if busy is not None and busy >= CONTENTION_WARNING_CORES:
        notes.append(f"host busy: others used {busy:.1f} CPUs")
    steal = row.get("host_steal_cpus")
    if steal is not None and steal >= STEAL_WARNING_CPUS:
        notes.append(f"hypervisor stole {steal:.2f} CPUs")
    void = row.get("void_takes") or []
    if void:
        notes.append("retaken: void beside steal " + ", ".join(f"{take['steal_cpus']:.2f}" for take in void) + " CPUs")
    notes += [
        f"NOT AS CONFIGURED: {a['direction'].replace('_', ' ')} loss {a['loss_applied'] * 100:.3g}% applied, "
        f"{a['loss_asked'] * 100:.3g}% asked"
        for a in row.get("applied") or []
        if not a.get("as_configured", True)
    ]
    share = row.get("share") or {}
    if share and share.get("low_bps") is not None and share.get("high_bps") is not None and share.get("bps") is None:
        notes.append(
            f"shared by {share['flows']} flows of different RTTs: share {share['low_bps'] / 1e6:.3g}-"
            f"{share['high_bps'] / 1e6:.3g} Mbit/s"
        )
    elif share and not share.get("established", True):
        notes.append(f"shared by {share['flows']} flows: no established model for the split")
    delay = row.get("applied_delay") or {}
    if not delay.get("as_configured", True):
        notes.append(
            f"NOT AS CONFIGURED: round trip floor {delay['floor_s'] * 1e3:.4g} ms, {delay['asked_s'] * 1e3:.4g} ms asked"
        )
    rate = row.get("applied_rate") or {}
    if not rate.get("as_configured", True):
        notes.append(
            f"NOT AS CONFIGURED: rate {rate['measured_bps'] / 1e6:.4g} Mbit/s of payload, "
            f"{rate['asked_bps'] / 1e6:.4g} Mbit/s asked"
        )
    duplicate = row.get("applied_duplicate") or {}
    if not duplicate.get("as_configured", True):
        notes.append(
            f"NOT AS CONFIGURED: {duplicate['dsacked']} of {duplicate['segments']} segments duplicated, "
            f"{duplicate['asked'] * 100:.3g}% asked"
        )
    reorder = row.get("applied_reorder") or {}
    if not reorder.get("as_configured", True):
        notes.append(f"NOT AS CONFIGURED: no reordering seen, {reorder['asked'] * 100:.3g}% asked")
    return "; ".join(notes)


def expected_cell(row):
    """The model's figure: a rate, or a time for the kinds judged by time (requests, latency)."""
    bound = f" ({row['bound']})" if row.get("bound") else ""
    if row.get("figure"):
        return (time_cell(row.get("expected_s")) + bound) if row.get("expected_s") is not None else MISSING
    return rate_cell(row.get("expected_bps")) + bound


def measured_cell(row):
    """What was measured: a rate, or 'p50 FCT 12.1 ms' for the kinds judged by time."""
    if row.get("figure"):
        return f"{row['figure']} {time_cell(row.get('measured_s'))}" if row.get("measured_s") is not None else MISSING
    return rate_cell(row.get("measured_bps"))


def time_cell(seconds):
    return format_time(seconds) if seconds is not None else MISSING


def format_table(header, body, *, markdown=False):
    """Left-aligned columns separated by two spaces, with a rule under the header (markdown=True: a Markdown table,
    as a CI job summary shows it)."""
    if markdown:
        cells = [[str(c).replace("|", "\\|") for c in line] for line in [header, *body]]
        rows = ["| " + " | ".join(line) + " |" for line in cells]
        rows.insert(1, "|" + "---|" * len(header))
        return "\n".join(rows)
    widths = [max(len(str(c)) for c in column) for column in zip(header, *body)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip() for line in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def short_test(nodeid):
    """'tests/test_x.py::test_y[a]' -> 'test_x.py::test_y[a]' (the directory rarely tells flows apart)."""
    path, sep, rest = (nodeid or MISSING).partition("::")
    return path.rsplit("/", 1)[-1] + sep + rest


def link_cell(link):
    if not link:
        return MISSING
    text = (link.get("describe") or MISSING).removeprefix("both ways: ")
    return text.replace(" (RTT 0 us)", "") if link.get("rtt_s") == 0 else text


def buffers_cell(buffers):
    """'snd auto→46.1 kB, rcv 16.38 kB→32.77 kB': requested (auto = autotuning) → what the kernel gave."""
    parts = []
    for side in ("snd", "rcv"):
        requested, effective = buffers.get(f"{side}buf_requested"), buffers.get(f"{side}buf")
        text = f"{side} {format_size(requested) if requested else 'auto'}"
        if effective:
            text += f"→{format_size(effective)}"
        parts.append(text)
    return ", ".join(parts)


def rate_cell(bps):
    return format_rate(bps) if bps else MISSING


def ratio_cell(ratio):
    return f"{ratio:.2f}" if ratio is not None else MISSING


def count_cell(value):
    return MISSING if value is None else str(value)


#: Row field -> JUnit property suffix; the key figures a CI dashboard trends.
JUNIT_FIELDS = (
    ("kernel", "kernel"),
    ("link", "link"),
    ("cc", "cc"),
    ("kind", "kind"),
    ("measured_bps", "measured_bps"),
    ("expected_bps", "expected_bps"),
    ("measured_s", "measured_s"),
    ("expected_s", "expected_s"),
    ("bound", "bound"),
    ("ratio", "ratio"),
    ("limited_by", "limited_by"),
    ("window_full", "window_full"),
    ("retransmissions", "retransmissions"),
    ("min_rtt_s", "min_rtt_s"),
    ("advertised_window", "advertised_window"),
)


def junit_properties(rows):
    """[(name, value)] for a test's flows: 'tcpnet.flow0.measured_bps' = '94120000', ... (missing figures left out)."""
    properties = []
    for row in rows:
        for field, suffix in JUNIT_FIELDS:
            value = row.get(field)
            if field == "link" and value:
                value = link_cell(value)
            if value is None:
                continue
            if isinstance(value, float):
                value = (
                    f"{value:.6g}" if field in ("ratio", "min_rtt_s", "measured_s", "expected_s") else f"{value:.0f}"
                )
            properties.append((f"tcpnet.flow{row.get('flow', 0)}.{suffix}", str(value)))
        void = row.get("void_takes") or []
        if void:
            properties.append(
                (
                    f"tcpnet.flow{row.get('flow', 0)}.void_takes_steal_cpus",
                    ",".join(f"{take['steal_cpus']:.3g}" for take in void),
                )
            )
    return properties
